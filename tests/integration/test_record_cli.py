"""`ringscope record` as a user runs it: a real process, real agents, SIGTERM, SIGKILL, and `ringscope info`."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringscope import agent
from ringscope.gui.core.ingest.session_reader import load


def _cli(*args: str, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, **kwargs)


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    out = tmp_path / "session.db"
    proc = _cli("record", "--out", str(out), "--bind", "tcp://127.0.0.1:0", "--progress-s", "0.3")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on tcp://127.0.0.1:" in line, line
        endpoint = line.split("listening on ")[1].split(",")[0]
        yield proc, endpoint, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def _count_steps(path: Path) -> int:
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute('SELECT COUNT(*) FROM "step"').fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_sigterm_stops_cleanly_with_everything_flushed(recording) -> None:
    proc, endpoint, out = recording
    telemetry = agent.start(framework="other", strategy="ddp", endpoint=endpoint, run_id="cli", sample_devices=False)
    for i in range(3000):
        telemetry.step(0, i, 1.0 + i, 1.5 + i)
    telemetry.close(5.0)
    deadline = time.monotonic() + 20
    while _count_steps(out) < 3000 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # let at least one progress line (every 0.3 s) be printed
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "received" in err and "stopped" in err  # progress lines and the final line
    data = load(out)
    assert sorted(data.steps["step"].astype(int).tolist()) == list(range(3000))
    # the agent's answer to the recorder's settings (send every 0.25 s, not every 0.05 s) is recorded too; here it
    # may come after "finished": the agent closes before its first flush, and answers while it closes
    assert sorted(e.event for e in data.events) == ["control", "finished", "started"]
    answer = next(json.loads(e.text or "{}") for e in data.events if e.event == "control")
    assert answer["applied"] == {"flush_interval_s": 0.25} and not answer["refused"]
    info = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(out)], capture_output=True, text=True,
                          timeout=60, check=True)
    summary = json.loads(info.stdout)
    assert summary["steps_per_rank"] == {"0": 3000} and summary["run_ids"] == ["cli"] and summary["complete"]


def test_records_dropped_because_the_writer_fell_behind_are_said_and_fail_the_exit_code(tmp_path: Path) -> None:
    """A flood into a 1 MB write queue: what the recorder drops is in the last line and the exit code, never only in
    an earlier progress line (8 192 ranks once ended "stopped; ... gaps 0" and exit 0 with 144 458 dropped)."""
    out = tmp_path / "flood.db"
    proc = _cli("record", "--out", str(out), "--bind", "tcp://127.0.0.1:0", "--progress-s", "0", "--queue-mb", "1")
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().split("listening on ")[1].split(",")[0]
        telemetry = agent.start(framework="other", strategy="ddp", endpoint=endpoint, run_id="flood",
                                sample_devices=False, queue_capacity=400_000)
        for i in range(200_000):
            telemetry.step(0, i, 1.0 + i, 1.5 + i, data_wait_s=0.1, compute_s=0.2, comm_s=0.1, comm_exposed_s=0.1)
        telemetry.close(10.0)
        sent = telemetry.stats
        assert sent is not None
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    dropped = int(err.split(", dropped ")[1].split()[0])
    assert proc.returncode == 1 and dropped > 0, err
    assert f"{dropped} received record(s) were dropped, not written" in err
    # every step is in the file or counted as dropped: by the recorder, by the agent (not sent), or said
    # unconfirmed by the agent at close (maybe written). The recorder's count also holds the hello, health and event
    # records of the messages it dropped: at most what the agent sent besides steps (how many hellos and healths
    # that is depends on how long the flood took, so it is counted, not guessed)
    unsaid = sent.dropped_records + sent.unconfirmed_at_close
    others = sent.sent_records - (200_000 - sent.dropped_records)
    assert 0 <= others < 100, sent
    assert 200_000 - dropped - unsaid <= _count_steps(out) <= 200_000 - dropped + others, sent


def test_sigkill_leaves_a_readable_file_with_everything_committed(recording) -> None:
    proc, endpoint, out = recording
    telemetry = agent.start(framework="other", strategy="ddp", endpoint=endpoint, run_id="kill", sample_devices=False)
    try:
        acknowledged = 0
        step = 0
        deadline = time.monotonic() + 30
        while acknowledged < 2000 and time.monotonic() < deadline:
            for _ in range(200):
                telemetry.step(0, step, 1.0 + step, 1.5 + step)
                step += 1
            time.sleep(0.05)
            acknowledged = _count_steps(out)
        assert acknowledged >= 2000
        proc.kill()
        proc.wait(10)
    finally:
        telemetry.close(1.0)
    data = load(out)
    steps = sorted(data.steps["step"].astype(int).tolist())
    assert len(steps) >= acknowledged
    assert steps == list(range(len(steps)))  # a prefix: nothing committed was lost, nothing is torn
    assert data.counters["records"] >= acknowledged


def test_info_exits_2_with_a_clear_message_on_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(os.urandom(2048))
    result = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(bad)], capture_output=True,
                            text=True,
                            timeout=60)
    assert result.returncode == 2 and "not a Ringscope session" in result.stderr and not result.stdout


def test_record_refuses_a_used_address(recording, tmp_path: Path) -> None:
    _, endpoint, _ = recording
    second = _cli("record", "--out", str(tmp_path / "two.db"), "--bind", endpoint)
    _, err = second.communicate(timeout=30)
    assert second.returncode == 2 and "address in use" in err
    assert not (tmp_path / "two.db").exists()
