"""A hung run in the window: real agents (real ZeroMQ) whose steps stop while their heartbeats go on. The cards name
the rank that did not reach the collective, the hang is recorded, and the details dialog shows its stack."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pytestqt.qtbot import QtBot

from ringscope import agent
from ringscope.agent.heartbeat import COLLECTIVE, COMPUTE
from ringscope.gui.app import build_window
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.analysis.runs import HUNG
from ringscope.gui.views.qt_preferences import Preferences


def _stuck_here(position: agent.heartbeat.Position, release: threading.Event) -> None:
    position.enter(COMPUTE, step=5)
    release.wait(30)  # the line the stack must show


def test_a_hung_run_names_its_stuck_rank_and_keeps_the_stack(qtbot: QtBot, tmp_path: Path) -> None:
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db",
                         preferences=Preferences(lost_timeout_s=3.0))
    qtbot.addWidget(parts.window)
    window = parts.window
    parts.runs.hang_minimum_s = 1.0  # hung after 1 s without a step (the default is 10 s)
    agents = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=2, endpoint=parts.collector.endpoint,
                          run_id="stuck", sample_devices=False) for r in (0, 1)]
    release = threading.Event()
    worker = None
    try:
        for k in range(5):
            now = time.time()
            for r, a in enumerate(agents):
                a.step(r, k, now - 0.01, now, data_wait_s=0.001, compute_s=0.005, comm_s=0.003, comm_exposed_s=0.003)
            time.sleep(0.01)
        agents[0].position().enter(COLLECTIVE, step=5, bucket=0)
        worker = threading.Thread(target=_stuck_here, args=(agents[1].position(), release), daemon=True)
        worker.start()
        agents[1]._heartbeat._stack_after_s = 0.5  # type: ignore[union-attr]  # stack after 0.5 s (default 5)

        def hung() -> None:
            window.refresh_runs()
            assert window.selected_run_id == "stuck" and window.run_row is not None and window.run_row.state == HUNG
            assert window.current_hang() is not None and window.current_hang().stacks  # type: ignore[union-attr]

        qtbot.waitUntil(hung, timeout=15_000)
        window._last_full_render = window._last_text_render = 0.0  # the next frame redraws the cards now
        window._text_key = ()
        window.render_frame()
        assert window.overview.straggler.value.text() == "hung · stuck: rank 1"
        assert "did not reach the collective" in window.overview.straggler.detail.text()
        dialog = window.show_hang_details()
        assert dialog is not None
        text = dialog.text.toPlainText()
        assert "in _stuck_here" in text and "release.wait(30)  # the line the stack must show" in text
        assert [p.rank for p in window.hangs["stuck"].stuck] == [1]  # the notice the status bar announced
        dialog.close()
    finally:
        release.set()
        if worker is not None:
            worker.join(5)
        for a in agents:
            a.close(timeout_s=1.0)
        parts.close()
    [hang] = summarize(tmp_path / "s.db")["hangs"]
    assert hang["run_id"] == "stuck" and hang["rank"] == 1 and "_stuck_here" in hang["text"]
