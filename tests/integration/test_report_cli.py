"""``ringscope report`` and ``ringscope compare`` on sessions recorded through the real path.

Simulated ranks (real agents, real ZeroMQ sockets) -> Collector -> Recorder (SQLite) -> the CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringscope.agent.simulate import run_cluster
from ringscope.gui.cli import main
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.report import build_report
from tests.ports import free_port

CLI_TIMEOUT_S = 120
DDP_TIMEOUT_S = 180
ROOT = Path(__file__).resolve().parents[2]


def _record(path: Path, **simulation: object) -> Path:
    recorder = Recorder(path).start()
    collector = Collector("tcp://127.0.0.1:0", sinks=[recorder]).start()
    try:
        run_cluster(4, endpoint=collector.endpoint, steps_per_second=20, steps=40, processes=0,
                    **simulation)  # type: ignore[arg-type]
        # Wait (bounded) until the collector has seen everything the agents flushed at close.
        deadline, last = time.monotonic() + 10, -1
        while time.monotonic() < deadline and collector.counters.records != last:
            last = collector.counters.records
            time.sleep(0.3)
    finally:
        collector.close()
        recorder.close()
    return path


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sessions")
    return {"straggler": _record(folder / "straggler.db", straggler=(2, 30.0)),
            "input": _record(folder / "input.db", data_stall_ms=40.0)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringscope.gui.cli", *args], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, check=False)


def test_recorded_straggler_is_found_with_its_injected_delay(sessions: dict[str, Path]) -> None:
    report = build_report(load(sessions["straggler"]))
    straggler = report.analysis.straggler
    assert straggler is not None and straggler.rank == 2
    assert straggler.gap_s == pytest.approx(0.030, abs=0.003)
    assert straggler.cause in ("compute", "hardware")
    input_bound = build_report(load(sessions["input"]))
    # 40 ms stall on every rank on top of a 2.5 ms (5 % of 50 ms) wait.
    assert input_bound.analysis.overall.seconds["data_wait"] == pytest.approx(0.0425, abs=0.003)
    assert "input_bound" in {r.key for r in input_bound.recommendations}


def test_report_writes_every_export(sessions: dict[str, Path], tmp_path: Path) -> None:
    out = _cli("report", str(sessions["straggler"]), "--html", str(tmp_path / "r.html"), "--pdf",
               str(tmp_path / "r.pdf"), "--csv", str(tmp_path / "csv"), "--trace", str(tmp_path / "t.json"),
               "--price-per-gpu-hour", "4")
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "r.html").read_text()
    assert "rank 2, late by" in html and "$4 per GPU-hour (from argument)" in html
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "csv" / "steps.csv").read_text().count("\n") == 1 + 4 * 40
    trace = json.loads((tmp_path / "t.json").read_text())
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1, 2, 3}


def test_report_needs_an_output(sessions: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(sessions["straggler"])]) == 2
    assert "give at least one of --html" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["text", "truncated", "missing"])
def test_bad_session_file_exits_2_with_the_reason(sessions: dict[str, Path], tmp_path: Path, damage: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.db"
    if damage == "text":
        bad.write_text("this is not a session\n")
    elif damage == "truncated":
        bad.write_bytes(sessions["straggler"].read_bytes()[:3000])
    # In-process: the same entry point as the console script, without paying a subprocess start per case.
    assert main(["report", str(bad), "--html", str(tmp_path / "r.html")]) == 2
    assert str(bad) in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_compare_two_recorded_sessions(sessions: dict[str, Path], tmp_path: Path) -> None:
    out = _cli("compare", str(sessions["straggler"]), str(sessions["input"]), "--html", str(tmp_path / "c.html"),
               "--pdf", str(tmp_path / "c.pdf"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "c.html").read_text()
    assert "straggler.db" in html and "input.db" in html
    assert "Data wait share" in out.stdout
    assert (tmp_path / "c.pdf").read_bytes().startswith(b"%PDF")
    assert _cli("compare", str(sessions["straggler"]), str(tmp_path / "nope.db"), "--html",
                str(tmp_path / "d.html")).returncode == 2


@pytest.mark.slow
def test_real_ddp_recording_names_the_slow_rank(tmp_path: Path) -> None:
    """2 gloo ranks under torchrun, rank 1 slowed by 100 ms per step, recorded and reported."""
    path = tmp_path / "ddp.db"
    recorder = Recorder(path).start()
    collector = Collector("tcp://127.0.0.1:0", sinks=[recorder]).start()
    env = dict(os.environ, RINGSCOPE_ENDPOINT=collector.endpoint, RINGSCOPE_RUN_ID="report-ddp", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(free_port()), "-m", "ringscope.trainers.ddp_trainer", "--log-every", "0", "--steps", "30",
               "--slow-rank", "1", "--slow-ms", "100", "--checkpoint-dir", str(tmp_path / "ckpt"),
               "--checkpoint-every-steps", "10"]
    try:
        with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) as proc:
            try:
                _, stderr = proc.communicate(timeout=DDP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # torchrun and both ranks
                _, stderr = proc.communicate(timeout=10)
        assert proc.returncode == 0, stderr[-3000:]
        deadline, last = time.monotonic() + 10, -1
        while time.monotonic() < deadline and collector.counters.records != last:
            last = collector.counters.records
            time.sleep(0.3)
    finally:
        collector.close()
        recorder.close()
    report = build_report(load(path), 2.0)
    a = report.analysis
    assert a.framework == "pytorch" and a.strategy == "ddp" and a.ranks == [0, 1]
    assert a.straggler is not None and a.straggler.rank == 1
    assert a.straggler.gap_s == pytest.approx(0.100, abs=0.015)
    assert a.straggler.cause == "compute"  # CPU run: no clock evidence, so not "hardware"
    assert len(a.checkpoints_s) >= 2
    assert report.cost.unit == "rank-hours" and not a.gpu_present
