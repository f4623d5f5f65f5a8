"""The foundation end to end: `ringscope simulate` -> collector -> recorder -> session file shows the straggler."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load


def test_simulate_command_with_a_straggler_is_recorded_with_the_straggler_pattern(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    recorder = Recorder(path).start()
    collector = Collector("tcp://127.0.0.1:0", [recorder]).start()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ringscope.gui.cli", "simulate", "--ranks", "8", "--steps-per-second", "20",
             "--straggler", "5:30", "--data-stall", "4", "--steps", "40", "--endpoint", collector.endpoint,
             "--run-id", "e2e"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert result.returncode == 0, result.stderr
        deadline = time.monotonic() + 20
        while recorder.rows_written < 8 * 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        collector.close()
        recorder.close()
    data = load(path)
    assert data.ranks == list(range(8)) and {h.framework for h in data.agents} == {"simulated"}
    assert {h.run_id for h in data.agents} == {"e2e"}
    assert len(data.steps["rank"]) == 8 * 40 and data.counters["gaps"] == 0
    exposed = {r: float(np.median(data.steps_of(r)["comm_exposed_s"])) for r in range(8)}
    assert min(exposed, key=exposed.__getitem__) == 5
    assert all(exposed[r] - exposed[5] > 0.025 for r in range(8) if r != 5)  # ~ the straggler's 30 ms
    ends = np.stack([data.steps_of(r)["end_s"] for r in range(8)])
    assert np.ptp(ends, axis=0).max() < 1e-6  # synchronous: every rank's step ends together
    assert np.all(np.stack([data.steps_of(r)["data_wait_s"] for r in range(8)]) > 0.004)
    util = data.gpu["util_pct"][data.gpu["rank"] == 5].mean(), data.gpu["util_pct"][data.gpu["rank"] == 0].mean()
    assert util[0] > util[1]  # the straggler computes while the others wait
    assert data.counters["dropped_by_agents"] == 0


def test_several_agent_processes_every_record_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "multi.db"
    recorder = Recorder(path).start()
    collector = Collector("tcp://127.0.0.1:0", [recorder]).start()
    script = ("import sys, agent\n"
              "t = agent.start(framework='other', strategy='ddp', rank=int(sys.argv[2]), world_size=4,"
              " endpoint=sys.argv[1], run_id='m', sample_devices=False)\n"
              "[t.step(int(sys.argv[2]), i, 1.0 + i, 1.2 + i) for i in range(5000)]\n"
              "t.close(5.0)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, collector.endpoint, str(r)],
                              env={**os.environ, "PYTHONPATH": os.getcwd()}) for r in range(4)]
    try:
        for proc in procs:
            assert proc.wait(60) == 0
        deadline = time.monotonic() + 20
        # each agent sends 5000 steps + started/finished events (+ hello/health): wait until all are written
        while time.monotonic() < deadline and not (
            recorder.rows_written >= 4 * 5002 and recorder.rows_written == collector.counters.records
        ):
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.kill()
        collector.close()
        recorder.close()
    data = load(path)
    for rank in range(4):
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(5000))
    assert data.counters["records"] == collector.counters.records == recorder.rows_written
    assert data.counters["gaps"] == 0 and data.counters["dropped_by_agents"] == 0
