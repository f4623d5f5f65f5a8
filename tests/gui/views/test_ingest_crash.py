"""The window survives its ingest process: aborted mid-run, the window says so in red, keeps the last frame on
screen, and still closes cleanly; the recording keeps what was committed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from ringscope import agent
from ringscope.gui.app import build_window
from ringscope.gui.core.ingest.session import load as load_session
from ringscope.gui.core.service.client import IngestError
from ringscope.gui.views.qt_preferences import Preferences


def test_an_aborted_ingest_process_is_reported_and_the_window_keeps_working(qtbot: QtBot, tmp_path: Path) -> None:
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db", preferences=Preferences())
    qtbot.addWidget(parts.window)
    window = parts.window
    agents = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=2, endpoint=parts.collector.endpoint,
                          run_id="doomed", sample_devices=False) for r in (0, 1)]
    try:
        for k in range(20):
            now = time.time()
            for r, a in enumerate(agents):
                a.step(r, k, now - 0.01, now, data_wait_s=0.001, compute_s=0.005, comm_s=0.003, comm_exposed_s=0.002)
            time.sleep(0.005)

        def shown() -> None:
            window.refresh_runs()
            window.render_frame()
            assert window.selected_run_id == "doomed" and window.last_snapshot is not None
            assert window.last_snapshot.steps_total == 40 and parts.recorder is not None
            assert parts.recorder.rows_written >= 40

        qtbot.waitUntil(shown, timeout=20_000)
        time.sleep(0.5)  # the recorder commits every 0.2 s: the steps are in the file before the abort
        assert parts.ingest is not None
        with pytest.raises(IngestError):
            parts.ingest.call("service", "crash")
        qtbot.waitUntil(lambda: (window.refresh_runs(), window.ingest_failure is not None)[1], timeout=10_000)
        notice = window.status.export_notice
        assert not notice.isHidden() and "Collector stopped" in notice.label.text()
        assert "SIGABRT" in notice.label.text() and "s.db" in notice.label.toolTip()
        before = window.last_snapshot
        for _ in range(3):
            window.render_frame()  # draws on from what it had: no exception
        after = window.last_snapshot
        assert after is not None and after.version == before.version and after.steps_total == 40  # the last frame
        window.grab().save(str(tmp_path / "after-crash.png"))
    finally:
        for a in agents:
            a.close(timeout_s=1.0)
        parts.close()
    assert len(load_session(tmp_path / "s.db").steps["step"]) == 40
