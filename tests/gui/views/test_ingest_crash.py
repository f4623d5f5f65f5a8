"""The window survives its ingest process: aborted mid-run, a new one takes its place (the status bar says so) and
the run goes on with its history; one that keeps dying is reported in red, the last frame stays on screen, the
window still closes cleanly, and the recording keeps what was committed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from ringscope import agent
from ringscope.gui.app import build_window
from ringscope.gui.core.ingest.session_reader import load as load_session
from ringscope.gui.core.service.process import IngestError
from ringscope.gui.views.qt_preferences import Preferences
from tests.agent_steps import send_steps


def test_an_aborted_ingest_process_is_restarted_and_one_that_keeps_dying_is_reported(qtbot: QtBot,
                                                                                     tmp_path: Path) -> None:
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db", preferences=Preferences())
    qtbot.addWidget(parts.window)
    window = parts.window
    agents = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=2, endpoint=parts.collector.endpoint,
                          run_id="doomed", sample_devices=False) for r in (0, 1)]
    try:
        send_steps(agents, 0, 20)

        def shown(steps: int) -> Callable[[], None]:
            def check() -> None:
                window.refresh_runs()
                window.render_frame()
                assert window.selected_run_id == "doomed" and window.last_snapshot is not None
                assert window.last_snapshot.steps_total == steps and parts.recorder is not None
            return check

        def restarted(times: int) -> Callable[[], bool]:
            return lambda: (window.refresh_runs(), (window.ingest_restarted or (0,))[0] == times)[1]

        qtbot.waitUntil(shown(40), timeout=20_000)
        assert parts.ingest is not None
        with pytest.raises(IngestError):
            parts.ingest.call("service", "crash")  # os.abort() there, as a segfault would
        qtbot.waitUntil(restarted(1), timeout=10_000)
        assert window.status.currentMessage() == ("Ingest process restarted (crash: killed by SIGABRT); recording "
                                                  "continues in the same session")
        assert window.ingest_failure is None and window.status.export_notice.isHidden()
        send_steps(agents, 20, 20)  # the run goes on: its charts keep the history and take the new steps
        qtbot.waitUntil(shown(80), timeout=20_000)
        window.grab().save(str(tmp_path / "after-restart.png"))

        for restarts in (2, 3):  # MAX_RESTARTS within a minute, then it is left stopped
            with pytest.raises(IngestError):
                parts.ingest.call("service", "crash")
            qtbot.waitUntil(restarted(restarts), timeout=10_000)
            # what the crashed process had not committed yet the agents send again (unacknowledged): the new one
            # shows the whole run once it is in, both ranks from its first frame (their rows are in the file)
            assert window.last_snapshot is not None and list(window.last_snapshot.ranks) == [0, 1]
            qtbot.waitUntil(shown(80), timeout=20_000)

        def committed() -> None:  # received is not committed (0.2 s later): a collector that dies for good
            assert len(load_session(tmp_path / "s.db").steps["step"]) == 80  # loses what it had not (agents keep it)
        qtbot.waitUntil(committed, timeout=10_000)
        with pytest.raises(IngestError):
            parts.ingest.call("service", "crash")
        qtbot.waitUntil(lambda: (window.refresh_runs(), window.ingest_failure is not None)[1], timeout=10_000)
        notice = window.status.export_notice
        assert not notice.isHidden() and "Collector stopped" in notice.label.text()
        assert "SIGABRT" in notice.label.text() and "not restarted again" in notice.label.toolTip()
        assert "s.db" in notice.label.toolTip()
        before = window.last_snapshot
        for _ in range(3):
            window.render_frame()  # draws on from what it had: no exception
        after = window.last_snapshot
        assert after is not None and before is not None and after.steps_total == 80  # the last frame stays
        cpu = time.process_time()  # the dead process's socket stays readable: it must not wake the window in a loop
        qtbot.wait(1000)
        assert time.process_time() - cpu < 0.3
        window.grab().save(str(tmp_path / "after-crash.png"))
    finally:
        for a in agents:
            a.close(timeout_s=1.0)
        parts.close()
    assert len(load_session(tmp_path / "s.db").steps["step"]) == 80
