"""Record a training that runs on several test hosts: a collector and recorder in this process on the master node's
address, one command per host (``TestHosts.popen``), then the session loaded back. Shared by the multi-node tests."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.session_data import SessionData
from tests.multinode.hosts import TestHosts

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Training:
    data: SessionData
    outputs: list[str]
    returncodes: list[int]
    counters: dict[str, int]
    asked: Any = None  # what ``during`` returned



def record_on_hosts(path: Path, run_id: str, commands: Callable[[TestHosts, int], Sequence[str]], *, hosts: int = 2,
                    expected_steps: int, shape: str | None = None, host_env: dict[int, dict[str, str]] | None = None,
                    timeout_s: float = 400, during: Callable[[Collector], object] | None = None) -> Training:
    """Run ``commands(hosts, i)`` on each host ``i`` (host 1's link limited to ``shape`` when given), recorded into
    ``path``; waits until ``expected_steps`` step rows and every accepted record are written. ``during`` is called
    with the collector while the trainings run (what it returns is ``Training.asked``)."""
    with TestHosts(hosts) as test_hosts:
        if shape:
            test_hosts.shape(1, shape)
        recorder = Recorder(path).start()
        collector = Collector(f"tcp://{test_hosts.master_address}:0", [recorder]).start()
        try:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0",
                   "RINGSCOPE_ENDPOINT": collector.endpoint, "RINGSCOPE_RUN_ID": run_id}
            processes = [test_hosts.popen(i, list(commands(test_hosts, i)), cwd=ROOT,
                                          env={**env, **(host_env or {}).get(i, {})}, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
                         for i in range(hosts)]
            asked = during(collector) if during is not None else None
            outputs = [p.communicate(timeout=timeout_s)[0] for p in processes]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (recorder.rows_written < expected_steps
                                                   or recorder.rows_written != collector.counters.records):
                time.sleep(0.1)
            counters = {"gaps": collector.counters.gaps, "records": collector.counters.records}
        finally:
            collector.close()
            recorder.close()
    return Training(load(path), outputs, [p.returncode for p in processes], counters, asked)
