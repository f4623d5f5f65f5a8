"""The ingest process for real: a subprocess with its own collector and recorder, real agents over ZeroMQ, real
SQLite files; its window side gone (killed) or itself gone (aborted) without losing what was recorded."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringscope import agent
from ringscope.gui.core.ingest.session_reader import load as load_session
from ringscope.gui.core.service.process import IngestError, IngestProcess
from ringscope.gui.core.service.remote import RemoteRuns
from ringscope.gui.core.service.server import IngestSetup
from tests.agent_steps import send_steps

ROOT = Path(__file__).resolve().parents[4]


def _send_steps(endpoint: str, run_id: str, ranks: int, steps: int) -> None:
    agents = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=ranks, endpoint=endpoint,
                          run_id=run_id, sample_devices=False) for r in range(ranks)]
    try:
        send_steps(agents, 0, steps)
    finally:
        for a in agents:
            a.close(timeout_s=5.0)


def _wait(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _steps_in(path: Path) -> int:
    return len(load_session(path).steps["step"])


def test_frames_rows_and_the_recording_come_from_the_ingest_process(tmp_path: Path) -> None:
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(tmp_path / "s.db"))).start()
    try:
        assert ingest.pid != os.getpid() and ingest.recording_path == tmp_path / "s.db"
        runs = RemoteRuns(ingest, 5.0)
        _send_steps(ingest.endpoint, "r1", ranks=2, steps=40)
        _wait(lambda: "r1" in runs.run_ids() or (runs.rows(), False)[1])
        store = runs.store("r1")
        assert store is not None
        snap = store.snapshot(now_s=time.time())  # a frame built after every step was received
        assert list(snap.ranks) == [0, 1] and snap.steps_total == 80 and snap.framework == "pytorch"
        _wait(lambda: [row.run_id for row in runs.rows()] == ["r1"])  # the table is refreshed on its own beat
        assert runs.store("nope") is None
        assert ingest.call("collector", "counters").agents == 2
        with pytest.raises(IngestError, match="no such call"):
            ingest.call("runs", "__init__")
    finally:
        figures = ingest.close()
    assert figures["write_errors"] == 0 and figures["messages"] > 0
    assert _steps_in(tmp_path / "s.db") == 80


def test_a_bind_that_fails_is_a_clear_error_and_no_process_is_left(tmp_path: Path) -> None:
    first = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0")).start()
    try:
        second = IngestProcess(IngestSetup(bind=first.endpoint))
        with pytest.raises(Exception, match="in use") as caught:
            second.start()
        assert type(caught.value).__name__ == "CollectorError"
        assert second._process is not None and second._process.poll() is not None
    finally:
        first.close()


def test_an_aborted_ingest_process_is_reported_and_its_recording_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    # not restarted (test_ingest_restart.py restarts it): what the window sees of a process that stays gone
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(path)), max_restarts=0).start()
    runs = RemoteRuns(ingest, 5.0)
    _send_steps(ingest.endpoint, "r1", ranks=2, steps=30)

    def written() -> int:
        runs.rows()  # takes the newest reply, with the recorder's figures
        return int(ingest.frames.recorder.get("rows_written", 0)) if ingest.frames is not None else 0

    seen: list[int] = []
    _wait(lambda: (seen.append(written()), time.sleep(0.3), len(seen) > 1 and seen[-1] == seen[-2] >= 60)[2])
    with pytest.raises(IngestError):
        ingest.call("service", "crash")  # os.abort() there, as a segfault would
    _wait(lambda: runs.failure is not None)
    assert "SIGABRT" in (runs.failure or "")
    assert [row.run_id for row in runs.rows()] == ["r1"]  # the last rows stay; nothing raises
    assert runs.store("r1") is not None and runs.store("r1").snapshot().run_id in ("r1", "")  # type: ignore[union-attr]
    ingest.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _steps_in(path) == 60  # every step was committed before the abort (the rows written had settled)


WINDOW = """
import sys, time
from ringscope.gui.core.service.process import IngestProcess
from ringscope.gui.core.service.server import IngestSetup
from tests.agent_steps import send_steps
ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=sys.argv[1], orphan_quiet_s=1.5)).start()
print(ingest.endpoint, ingest.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def test_a_killed_window_leaves_its_ingest_process_recording_until_the_agents_are_quiet(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    window = subprocess.Popen([sys.executable, "-c", WINDOW, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert window.stdout is not None
        endpoint, pid = window.stdout.readline().split()
        window.send_signal(signal.SIGKILL)  # the window dies: no close, no goodbye
        window.wait(10)
        _send_steps(endpoint, "after", ranks=2, steps=25)  # the training goes on, and so does the recording
        _wait(lambda: _gone(int(pid)), timeout_s=30)  # 1.5 s after the last message it closes the file
    finally:
        if window.poll() is None:
            window.kill()
    data = load_session(path)
    assert len(data.steps["step"]) == 50 and set(data.steps["rank"].tolist()) == {0, 1}
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
