"""The ingest process restarts itself after a crash: a real ingest process recording a real session file, real
agents stepping fast on training threads, a SIGKILL mid-run; the new process is back on the same endpoint within
5 s, the run goes on live with its history, and the file holds every step exactly once across its segments."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ringscope import agent
from ringscope.agent.runtime import Agent
from ringscope.gui.core.ingest.session_reader import load as load_session
from ringscope.gui.core.service.process import IngestProcess
from ringscope.gui.core.service.remote import RemoteRuns
from ringscope.gui.core.service.server import IngestSetup

BACK_WITHIN_S = 5.0


class _Training:
    """``ranks`` agents of one run, stepping on a thread as fast as a 1 ms sleep allows (~500-1000 steps/s each)."""

    def __init__(self, endpoint: str, run_id: str, ranks: int) -> None:
        self.agents: list[Agent] = [
            agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=ranks, endpoint=endpoint,
                        run_id=run_id, sample_devices=False) for r in range(ranks)]
        self.steps = 0  # steps every rank took
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train, daemon=True)
        self._thread.start()

    def _train(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for rank, telemetry in enumerate(self.agents):
                telemetry.step(rank, self.steps, now - 0.001, now, data_wait_s=0.0001, compute_s=0.0006,
                               comm_s=0.0003, comm_exposed_s=0.0002)
            self.steps += 1
            time.sleep(0.001)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for telemetry in self.agents:
            telemetry.close(timeout_s=5.0)


def _wait(condition: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> float:
    """Seconds until ``condition`` held (asserts it did within ``timeout_s``)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.01)
    return time.monotonic() - started


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _committed_steps(path: Path) -> int:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
        return int(connection.execute('SELECT COUNT(*) FROM "step"').fetchone()[0])


@pytest.mark.parametrize("recorder_process", [False, True], ids=["recorder-in-process", "recorder-process"])
def test_a_killed_ingest_process_is_back_within_5_s_and_every_step_is_recorded_once(tmp_path: Path,
                                                                                    recorder_process: bool) -> None:
    """With a recorder process, the killed ingest process's writer finishes the file (it sees its parent gone) and
    the new one's waits for it: still every step once."""
    path = tmp_path / "s.db"
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(path),
                                       recorder_process=recorder_process)).start()
    endpoint, first_pid = ingest.endpoint, ingest.pid
    runs = RemoteRuns(ingest, 5.0)
    training = _Training(endpoint, "fast", ranks=2)
    try:
        _wait(lambda: "fast" in [row.run_id for row in runs.rows()], what="the run's row")
        _wait(lambda: _committed_steps(path) >= 1000, what="a second of recording")
        assert first_pid is not None
        assert bool(_children(first_pid)) == recorder_process
        os.kill(first_pid, signal.SIGKILL)
        back_s = _wait(lambda: ingest.restarted is not None or ingest.failure is not None, BACK_WITHIN_S * 2,
                       "the restart")
        assert ingest.failure is None and ingest.restarted is not None
        assert ingest.restarted[0] == 1 and "killed by SIGKILL" in ingest.restarted[1]
        assert "recording continues in the same session" in ingest.restarted[1]
        assert ingest.pid != first_pid and ingest.endpoint == endpoint and ingest.recording_path == path
        at_restart = _committed_steps(path)
        recording_again_s = back_s + _wait(lambda: _committed_steps(path) > at_restart + 1000, what="new steps")
        store = runs.store("fast")
        assert store is not None
        # the run goes on live in the new process, its history reloaded from the recording
        live = store.snapshot(now_s=time.time())
        assert live.run_id == "fast" and live.steps_total >= at_restart and not live.ended
        assert [row.run_id for row in runs.rows()] == ["fast"]
    finally:
        training.finish()
    sent = training.steps
    # every step reached the new process's live store exactly once too (reloaded + received, duplicates dropped)
    _wait(lambda: store.snapshot(now_s=time.time()).steps_total == 2 * sent, what="every step in the live store")
    figures = ingest.close()
    data = load_session(path)
    ranks, steps = data.steps["rank"].astype(np.int64), data.steps["step"].astype(np.int64)
    lost = duplicated = 0
    for rank in (0, 1):
        mine = steps[ranks == rank]
        lost += sent - len(np.unique(mine[mine < sent]))
        duplicated += len(mine) - len(np.unique(mine))
    print(f"\ningest process SIGKILLed while recording 2 ranks x {sent} steps: back in {back_s:.2f} s, recording "
          f"again {recording_again_s:.2f} s after the kill; steps lost {lost}, duplicated {duplicated}")
    assert back_s < BACK_WITHIN_S
    assert lost == 0 and duplicated == 0 and len(steps) == 2 * sent
    assert data.counters["gaps"] == 0 and data.counters["joined_late"] == []
    assert figures["write_errors"] == 0 and figures["messages"] > 0
    segments = json.loads(data.counters["meta"]["segments"])
    assert len(segments) == 2 and "killed by SIGKILL" in segments[1]["reason"]
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_restarts_are_limited_and_then_the_failure_says_why(tmp_path: Path) -> None:
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(tmp_path / "s.db")),
                           max_restarts=1).start()
    try:
        first_pid = ingest.pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        _wait(lambda: ingest.restarted is not None, BACK_WITHIN_S * 2, "the restart")
        assert ingest.call("service", "pid") == ingest.pid != first_pid  # calls reach the new process
        second_pid = ingest.pid
        assert second_pid is not None
        os.kill(second_pid, signal.SIGKILL)
        _wait(lambda: ingest.failure is not None, BACK_WITHIN_S * 2, "giving up")
        assert ingest.failure is not None and "killed by SIGKILL" in ingest.failure
        assert "not restarted again: it ended 2 times within 60 s" in ingest.failure
        assert ingest.restarted is not None and ingest.restarted[0] == 1 and ingest.pid == second_pid
    finally:
        assert ingest.close() == {}


def test_a_session_not_recorded_restarts_too_and_says_its_runs_start_again(tmp_path: Path) -> None:
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0")).start()
    try:
        pid = ingest.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: ingest.restarted is not None, BACK_WITHIN_S * 2, "the restart")
        assert ingest.restarted is not None and "not recorded" in ingest.restarted[1]
        assert ingest.call("collector", "counters").messages == 0
    finally:
        assert ingest.close()["messages"] == 0


@pytest.mark.parametrize("recorder_process", [False, True], ids=["recorder-in-process", "recorder-process"])
def test_a_sigterm_to_the_whole_window_closes_it_without_a_restart_and_keeps_every_step(tmp_path: Path,
                                                                                        recorder_process: bool) -> None:
    """GNU ``timeout`` (and a terminal's job control) signals the window's whole process group; systemd signals its
    whole cgroup. The window closes ~0.2 s later on its heartbeat: the ingest process waits for that close, so what
    the window notes while closing (its launches' last state) is recorded, no new process is started and no crash
    is reported."""
    path = tmp_path / "s.db"
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(path),
                                       recorder_process=recorder_process)).start()
    pid = ingest.pid
    assert pid is not None
    training = _Training(ingest.endpoint, "term", ranks=2)
    _wait(lambda: _committed_steps(path) >= 500, what="some recording")
    training.finish()
    for each in [pid, *_children(pid)]:  # the recorder process too, where there is one
        os.kill(each, signal.SIGTERM)
    time.sleep(0.3)  # the window's signal heartbeat (0.2 s) runs its close
    assert _alive(pid)  # it waits for the window's close (TERM_GRACE_S), so the window's last notes are recorded
    ingest.call("recorder", "note_launch", "term", "stopped", -15, time.time(), "stopped from the window")
    figures = ingest.close()
    assert figures["messages"] > 0 and figures["write_errors"] == 0  # closed in order by the window
    assert ingest.restarted is None and ingest.failure is None and ingest.pid == pid
    data = load_session(path)
    assert len(data.steps["step"]) == 2 * training.steps and data.counters["gaps"] == 0  # closed in order: nothing lost
    assert "segments" not in data.counters["meta"]  # one segment: the recording was never resumed
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
        assert connection.execute("SELECT run_id, state FROM launches").fetchall() == [("term", "stopped")]


def test_a_sigterm_to_the_ingest_process_alone_starts_a_new_one_and_says_it_was_not_a_crash(tmp_path: Path) -> None:
    ingest = IngestProcess(IngestSetup(bind="tcp://127.0.0.1:0", record_to=str(tmp_path / "s.db"))).start()
    try:
        pid = ingest.pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: ingest.restarted is not None or ingest.failure is not None, BACK_WITHIN_S * 3, "the restart")
        assert ingest.failure is None and ingest.restarted is not None and ingest.pid != pid
        assert ingest.restarted[1].startswith("Ingest process restarted (it closed itself (exit code 0): a SIGTERM "
                                              "sent to the ingest process alone); recording continues")
    finally:
        assert ingest.close()["messages"] == 0


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent's wait (the supervisor reaps it at once)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
