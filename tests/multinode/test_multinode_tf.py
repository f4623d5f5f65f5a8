"""A real 2-host MultiWorkerMirroredStrategy training across network namespaces (one worker per host, TF_CONFIG
naming both hosts' addresses), recorded by a collector on the master node's address: workers grouped by host,
every step of every worker recorded, nothing lost."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.multinode.hosts import TestHosts, missing_requirements
from tests.multinode.recording import record_on_hosts

STEPS = 40
PORT = 29610

_why = missing_requirements()
if _why and not os.environ.get("CI"):
    pytest.skip(f"multi-node tests need network namespaces: {_why}", allow_module_level=True)


def test_two_hosts_multi_worker_mirrored_recorded_with_workers_grouped_by_host(tmp_path: Path) -> None:
    def worker(hosts: TestHosts, host: int) -> list[str]:
        config = {"cluster": {"worker": [f"{hosts.address(i)}:{PORT}" for i in range(2)]},
                  "task": {"type": "worker", "index": host}}
        return ["env", f"TF_CONFIG={json.dumps(config)}", "TF_CPP_MIN_LOG_LEVEL=2", sys.executable, "-m",
                "ringscope.trainers.tf_trainer", "--strategy", "multi_worker_mirrored", "--steps", str(STEPS),
                "--log-every", "0"]

    training = record_on_hosts(tmp_path / "mwms.db", "mn-mwms", worker, expected_steps=2 * STEPS)
    assert training.returncodes == [0, 0], "\n".join(o[-3000:] for o in training.outputs)
    data = training.data
    host_of = {rank: hello.host for hello in data.agents for rank in hello.ranks}
    assert sorted(host_of.values()) == ["node-0", "node-1"]  # one worker (one replica) per host
    assert {h.strategy for h in data.agents} == {"multi_worker_mirrored"}
    assert {h.node_rank for h in data.agents} == {0, 1}  # the worker index of TF_CONFIG
    for rank in host_of:
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(STEPS))
    assert data.counters["gaps"] == 0 and data.counters["dropped_by_agents"] == 0
    assert training.counters["gaps"] == 0
