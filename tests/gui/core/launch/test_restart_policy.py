"""The restart policy and its supervisor with real processes (no collector: restarts on exit codes), the launcher's
*Restart automatically*, and the control messages a supervisor sends to a real collector (status, attempt notes)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgpack
import pytest

from ringscope.agent import control
from ringscope.gui.core.ingest.ask import ask
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.launch import Launcher, LaunchSpec, free_ports
from ringscope.gui.core.launch.restart import FAULTS, RestartPolicy, parse_faults


def test_parse_faults_names_what_is_accepted() -> None:
    assert parse_faults("hang, LOST") == frozenset({"hang", "lost"})
    with pytest.raises(ValueError, match=r"unknown fault 'crash'.*hang, failure, lost"):
        parse_faults("hang,crash")
    with pytest.raises(ValueError, match="comma-separated"):
        parse_faults(" , ")


def test_policy_restarts_faults_it_covers_until_its_budget_is_spent() -> None:
    policy = RestartPolicy(frozenset({"hang", "failure"}), max_restarts=2, delay_s=0)
    assert policy.decide(1, "hang").restart and policy.decide(2, "failure").restart
    spent = policy.decide(3, "failure")
    assert not spent.restart and "restarted 2 time(s) already" in spent.text
    assert not policy.decide(1, "lost").restart  # not covered
    assert not policy.decide(1, "finished").restart and not policy.decide(1, "stopped").restart
    with pytest.raises(ValueError):
        RestartPolicy(frozenset({"oops"}))
    with pytest.raises(ValueError):
        RestartPolicy(frozenset(FAULTS), max_restarts=-1)


def _drive(launcher: Launcher, run: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while run.alive and time.monotonic() < deadline:  # type: ignore[attr-defined]
        launcher.poll()
        time.sleep(0.05)
    launcher.poll()


def test_launcher_restarts_a_failing_script_then_gives_up(tmp_path: Path) -> None:
    script = tmp_path / "flaky.py"
    script.write_text("import os, sys\nprint('attempt', os.environ['RINGSCOPE_ATTEMPT'])\n"
                      "sys.exit(0 if os.environ['RINGSCOPE_ATTEMPT'] == '3' else 5)\n")
    launcher = Launcher(f"tcp://127.0.0.1:{free_ports(1)[0]}")
    spec = LaunchSpec(kind="script", trainer=str(script), processes=1, python=sys.executable, restart_max=2)
    run = launcher.start(spec)
    _drive(launcher, run)
    assert run.supervisor is not None and run.supervisor.done
    assert [(a.attempt, a.reason, a.exit_code) for a in run.supervisor.attempts] == [
        (1, "failure", 5), (2, "failure", 5), (3, "finished", 0)]
    assert run.ok and "attempt 3" in run.processes[0].output.since(0)[2]
    script.write_text("import sys\nsys.exit(7)\n")
    run = launcher.start(LaunchSpec(kind="script", trainer=str(script), processes=1, python=sys.executable,
                                    restart_max=1))
    _drive(launcher, run)
    assert run.supervisor is not None and len(run.supervisor.attempts) == 2 and run.supervisor.exit_code == 7


def test_stop_from_the_window_never_restarts(tmp_path: Path) -> None:
    script = tmp_path / "long.py"
    script.write_text("import time\ntime.sleep(60)\n")
    launcher = Launcher(f"tcp://127.0.0.1:{free_ports(1)[0]}")
    run = launcher.start(LaunchSpec(kind="script", trainer=str(script), processes=1, python=sys.executable,
                                    restart_max=3))
    time.sleep(0.5)
    launcher.request_stop(run.run_id, grace_s=2)
    _drive(launcher, run, 20)
    assert run.supervisor is not None and [a.reason for a in run.supervisor.attempts] == ["stopped"]
    assert not run.alive


def test_collector_answers_status_and_records_attempt_notes() -> None:
    class Notes:
        def __init__(self) -> None:
            self.seen: list[tuple[str, control.AttemptNote]] = []

        def on_batch(self, *args: object) -> None: ...
        def on_gap(self, *args: object) -> None: ...
        def on_rejection(self, *args: object) -> None: ...

        def on_attempt(self, run_id: str, note: control.AttemptNote) -> None:
            self.seen.append((run_id, note))

        def run_status(self, run_id: str) -> dict[str, object] | None:
            return {"state": "hung", "attempt": 2} if run_id == "r1" else None

    notes = Notes()
    with Collector(f"tcp://127.0.0.1:{free_ports(1)[0]}", [notes]) as collector:
        assert ask(collector.endpoint, "status", run_id="r1", timeout_s=5) == {"state": "hung", "attempt": 2}
        assert ask(collector.endpoint, "status", run_id="other", timeout_s=5) == {"state": None}
        note = control.AttemptNote(2, "ended", 123.0, "hang", 1, "stuck")
        assert ask(collector.endpoint, "attempt", run_id="r1", attempt=note, timeout_s=5) == {"recorded": True}
    assert notes.seen == [("r1", note)]


@pytest.mark.parametrize("body", [{"n": 0, "event": "started", "ts_s": 1.0}, {"n": 1, "event": "paused", "ts_s": 1.0},
                                  {"n": 1, "event": "ended", "ts_s": "x"}, "not a map"])
def test_malformed_attempt_notes_are_refused(body: object) -> None:
    frames = [control.CONTROL_MARKER, msgpack.packb({"c": "attempt", "run": "r", "attempt": body})]
    with pytest.raises(control.ControlError, match="attempt"):
        control.decode(frames)
