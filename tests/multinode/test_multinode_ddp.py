"""A real 2-host x 2-rank torchrun/gloo DDP training across network namespaces, recorded by a collector on the master
node's address: ranks grouped by host, nothing lost; with one host's link rate-limited, the report blames the network.

The hosts are ``tests.multinode.hosts.TestHosts`` (root needed: CI runs as root; elsewhere the tests say why they
cannot run). One training per module condition (balanced, shaped), shared by the tests that read it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ringscope.gui.core.analysis.stacks import fold, render_text
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.ask import AskError, ask
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.report.html import write_html
from ringscope.gui.core.report.model import build_report
from tests.multinode.hosts import TestHosts, missing_requirements
from tests.multinode.recording import ROOT, Training, record_on_hosts

RANKS_PER_HOST = 2
STEPS = 80

_why = missing_requirements()
if _why and not os.environ.get("CI"):
    pytest.skip(f"multi-node tests need network namespaces: {_why}", allow_module_level=True)


def stacks_of_every_rank(run_id: str, ranks: int) -> Callable[[Collector], dict[str, Any] | None]:
    """Ask the collector for the run's stacks until every rank answered (at most 60 s): the reply path across
    hosts. Returns the answer and how long it took."""
    def during(collector: Collector) -> dict[str, Any] | None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                result = ask(collector.endpoint, "stacks", run_id=run_id, wait_s=2.0)
            except AskError:
                result = None
            if result is not None and result["answered"] and fold(result).ranks == ranks:
                return {**result, "took_s": time.monotonic() - started}
            time.sleep(0.3)
        return None
    return during


def train(tmp: Path, shape: str | None, run_id: str, extra: list[str] | None = None,
          skew_s: float | None = None, during: Callable[[Collector], object] | None = None) -> Training:
    """``torchrun --nnodes 2 --nproc-per-node 2`` on two test hosts (c10d rendezvous on host 0), recorded on the
    master address; returns the loaded session. ``skew_s`` moves every wall time host 1's agents send that many
    seconds ahead, as an unsynchronized host's clock would."""
    def torchrun(hosts: TestHosts, _host: int) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
                str(RANKS_PER_HOST), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts.address(0)}:29400",
                "--rdzv-id", run_id, "--max-restarts", "0", str(ROOT / "trainers" / "ddp_trainer.py"),
                "--steps", str(STEPS), "--log-every", "0", *(extra or [])]

    skewed = {1: {"RINGSCOPE_TEST_CLOCK_SKEW_S": str(skew_s)}} if skew_s is not None else None
    return record_on_hosts(tmp / f"{run_id}.db", run_id, torchrun, expected_steps=2 * RANKS_PER_HOST * STEPS,
                           shape=shape, host_env=skewed, during=during)


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Training]:
    yield train(tmp_path_factory.mktemp("balanced"), None, "mn-balanced",
                during=stacks_of_every_rank("mn-balanced", 2 * RANKS_PER_HOST))


def test_two_hosts_recorded_with_ranks_grouped_by_host_and_nothing_lost(balanced: Training) -> None:
    assert balanced.returncodes == [0, 0], "\n".join(o[-2000:] for o in balanced.outputs)
    data = balanced.data
    assert data.ranks == [0, 1, 2, 3]
    host_of = {}
    for hello in data.agents:
        for rank in hello.ranks:
            host_of[rank] = hello.host
    assert sorted(host_of.values()) == ["node-0", "node-0", "node-1", "node-1"]  # each namespace its own name
    assert host_of[0] == host_of[1] and host_of[2] == host_of[3]  # torchrun places ranks node by node
    node_of = {h.rank: h.node_rank for h in data.agents}
    assert {node_of[0], node_of[2]} == {0, 1}
    for rank in range(4):
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(STEPS))
    assert data.counters["gaps"] == 0 and data.counters["dropped_by_agents"] == 0
    assert balanced.counters["gaps"] == 0


def test_stacks_on_demand_reach_every_rank_on_both_hosts(balanced: Training) -> None:
    result = balanced.asked
    assert result is not None, "no stack dump with all 4 ranks answered while the run trained"
    print(f"4 ranks on 2 hosts answered in {result['took_s']:.2f} s")
    assert result["took_s"] < 2.0
    answered = [r for r in result["ranks"] if r["answered"]]
    assert sorted(r["rank"] for r in answered) == [0, 1, 2, 3]
    assert sorted({r["host"] for r in answered}) == ["node-0", "node-1"]
    folded = fold(result)
    assert all(any("ddp_trainer.py" in frame[0] for frame in group.frames) for group in folded.training), \
        render_text(folded)


def test_balanced_run_names_neither_a_straggler_nor_the_network(balanced: Training) -> None:
    summary = analyze(balanced.data)
    assert summary.straggler is None, summary.straggler
    # four ranks on two cores: the all-reduce takes most of the step, but no link queues, so it is not "network"
    assert summary.network is not None and summary.network.congested is False, summary.network
    assert summary.wait_diagnosis == "none"


def test_a_rate_limited_link_is_diagnosed_as_network_and_names_the_host(tmp_path: Path) -> None:
    shaped = train(tmp_path, "4mbit", "mn-shaped")
    assert shaped.returncodes == [0, 0], "\n".join(o[-2000:] for o in shaped.outputs)
    summary = analyze(shaped.data)
    network = summary.network
    assert network is not None
    assert summary.straggler is None, summary.straggler
    assert summary.wait_diagnosis == "network", network.evidence()
    assert network.slow_host == "node-1", network.evidence()  # the host whose link was limited
    slow = network.host("node-1")
    assert slow is not None and slow.bytes_per_step is not None and slow.bus_bandwidth_bps is not None
    # the gradients of the trainer's MLP, all-reduced at what a 4 Mbit/s link allows (about 0.5 MB/s, never more)
    assert slow.bytes_per_step == pytest.approx(float(np.median(shaped.data.steps["bucket_bytes"])))
    assert 0.1e6 < slow.bus_bandwidth_bps < 0.5e6, network.evidence()
    assert "node-1" in network.evidence() and "Mbit/s" in network.evidence()
    page = write_html(build_report(shaped.data), tmp_path / "shaped.html").read_text()
    assert "Network (per host)" in page and "slow link" in page
    assert "the network (interconnect) is the bottleneck" in page


def test_a_host_whose_clock_is_two_seconds_ahead_is_aligned_to_the_master(tmp_path: Path) -> None:
    skewed = train(tmp_path, None, "mn-skew", skew_s=2.0)
    assert skewed.returncodes == [0, 0], "\n".join(o[-2000:] for o in skewed.outputs)
    data = skewed.data
    offsets = data.counters["clock_offsets"]
    host_of = {h.agent_id: h.host for h in data.agents}
    assert {host_of[a] for a in offsets} == {"node-1"}  # only the skewed host's agents are shifted ...
    assert all(o == pytest.approx(-2.0, abs=0.02) for o in offsets.values())  # ... by its clock's 2 s
    # every rank's step ends right after the same all-reduce completes: on one time axis again
    ends = np.stack([data.steps_of(r)["end_s"] for r in range(4)])
    spread_ms = np.ptp(ends, axis=0) * 1e3
    assert np.median(spread_ms) < 5.0, spread_ms
