"""Looking back in the window: zoom / pan / follow live over a run's whole history, the overlay comparison of two
runs, export feedback (path in the status bar, normal file permissions) and reopening a recorded session read-only.

Runs are fed as real wire records into real ``LiveRuns`` (and a real ``Recorder``), with timestamps in the past so
that a run of minutes takes milliseconds to feed."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, Hello, Step
from ringscope.gui import app as gui_app
from ringscope.gui.app import build_viewer
from ringscope.gui.cli import _with_command, build_parser
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.views import theme
from ringscope.gui.views.qt_main_window import QtMainWindow
from ringscope.gui.views.qt_plot_tools import format_seconds
from ringscope.gui.views.qt_preferences import Preferences
from ringscope.gui.views.qt_time_range import FOLLOW_WINDOW_S, clock_text

WAIT_MS = 30_000


def feed_run(sinks: list, run_id: str, framework: str, strategy: str, ranks: int, start: float, end: float, *,
             step_s: float = 0.5, finish: bool = True, stall_s: float = 0.05, slow: int | None = None,
             fit: bool = False) -> None:
    """A synchronous run from ``start`` to ``end`` (Unix s) as the collector would deliver it to its sinks.

    ``slow``: that rank computes longer and so waits least in AllReduce (the straggler); ``fit``: phases are not
    measured (Keras ``model.fit`` sends the step time only)."""
    rng = np.random.default_rng(len(run_id))

    def deliver(agent_id: str, seq: int, ts: float, records: list) -> None:
        batch = wire.decode(wire.encode(agent_id, seq, ts, records))
        for sink in sinks:
            sink.on_batch(batch, ts)

    for r in range(ranks):
        hello = Hello(run_id, f"{run_id}-{r}", "node0", 100 + r, r, r, ranks, 0, [r], framework, strategy, None, [],
                      "0.1.0", "1.0", start, 0.0, start)
        deliver(hello.agent_id, 0, start, [hello])
    k, t = 0, start + step_s
    while t < end:
        for r in range(ranks):
            step = step_s * (1 + 0.1 * rng.standard_normal())
            stall = stall_s * (0.1 if r == slow else 1.0)
            phases = (None, None, None, None) if fit else (0.1 * step, 0.6 * step, 0.3 * step, stall)
            deliver(f"{run_id}-{r}", k + 1, t, [Step(r, k, t - step, t, step, *phases, 8, None, None, None, k == 0,
                                                    None)])
        k, t = k + 1, t + step_s
    if finish:
        for r in range(ranks):
            deliver(f"{run_id}-{r}", k + 1, end, [Event(end, EventKind.FINISHED, r, k, None, None, None, None)])


@pytest.fixture
def two_runs() -> LiveRuns:
    now = time.time()
    runs = LiveRuns(lost_timeout_s=2.0)
    feed_run([runs], "ddp-a", "pytorch", "ddp", 4, now - 1500, now - 900)  # a 10-minute run, ended
    feed_run([runs], "tf-b", "tensorflow", "MirroredStrategy", 2, now - 400, now, finish=False, stall_s=0.15)
    return runs


@pytest.fixture
def window(qtbot: QtBot) -> Iterator:  # type: ignore[type-arg]
    made: list[QtMainWindow] = []

    def make(runs: LiveRuns, **kwargs: object) -> QtMainWindow:
        win = QtMainWindow(runs, endpoint="tcp://127.0.0.1:1", preferences=Preferences(price_per_gpu_hour=2.0),
                           **kwargs)  # type: ignore[arg-type]
        win.timer.stop()  # the test draws frames itself
        win.cost_timer.stop()
        qtbot.addWidget(win)
        win.resize(1400, 900)
        win.show()
        made.append(win)
        return win

    yield make


def _wheel(plot: QtWidgets.QGraphicsView, clicks: int) -> None:
    """What a mouse wheel over the middle of a chart sends."""
    viewport = plot.viewport()
    centre = QtCore.QPointF(viewport.rect().center())
    event = QtGui.QWheelEvent(centre, QtCore.QPointF(viewport.mapToGlobal(centre.toPoint())), QtCore.QPoint(0, 0),
                              QtCore.QPoint(0, 120 * clicks), QtCore.Qt.MouseButton.NoButton,
                              QtCore.Qt.KeyboardModifier.NoModifier, QtCore.Qt.ScrollPhase.NoScrollPhase, False)
    QtWidgets.QApplication.sendEvent(viewport, event)


def _x_range(plot: QtWidgets.QGraphicsView) -> tuple[float, float]:
    low, high = plot.getPlotItem().vb.viewRange()[0]
    return float(low), float(high)


def test_zoom_turns_follow_off_and_follow_live_restores_the_live_range(qtbot: QtBot, window, two_runs) -> None:  # type: ignore[no-untyped-def]
    win = window(two_runs)
    win.render_frame()
    assert win.selected_run_id == "tf-b"
    columns = win.breakdown.columns_plot
    live = _x_range(columns)
    assert win.time_range.following and live[1] - live[0] == pytest.approx(FOLLOW_WINDOW_S, abs=1.0)
    assert 395 <= live[1] <= 410  # the run's last 2 minutes, in seconds since it started
    assert _x_range(win.stall.lines_plot) == pytest.approx(live)  # every time chart shows the same time
    assert columns.getPlotItem().getAxis("bottom").tickStrings([90.0, 3700.0], 1.0, 30.0) == ["1:30", "1:01:40"]

    _wheel(columns, 3)  # the user zooms in
    zoomed = _x_range(columns)
    assert not win.time_range.following and not win.follow_button.isChecked()
    assert zoomed[1] - zoomed[0] < live[1] - live[0]
    assert _x_range(win.data_idle.lines_plot) == pytest.approx(zoomed)
    assert _x_range(win.gpu_panel.series_plot) == pytest.approx(zoomed)
    win._last_full_render = 0.0
    win.render_frame()  # frames keep the user's range
    assert _x_range(columns) == pytest.approx(zoomed)

    win.follow_button.click()  # "Follow live" turns following back on
    assert win.time_range.following
    assert _x_range(columns) == pytest.approx(live, abs=1.0)

    win.whole_button.click()  # the whole run: from its start, with the history the store kept
    low, high = _x_range(columns)
    assert low == 0.0 and high >= 399 and not win.time_range.following
    first_column = win.breakdown.columns["compute"].opts["x"]
    assert len(first_column) and float(np.min(first_column)) < 10  # steps from the first seconds are still drawn


def test_an_ended_run_keeps_its_charts_and_a_long_run_says_its_bucket(qtbot: QtBot, window) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    runs = LiveRuns()
    feed_run([runs], "long", "pytorch", "ddp", 2, now - 2400, now - 1200, step_s=1.0)  # 20 min: 600 buckets of 2 s
    win = window(runs)
    win.render_frame()
    snap = win.last_snapshot
    assert snap is not None and snap.ended and snap.bucket_s == 2.0
    assert win.breakdown.bucket_label.text() == "bucket 2 s" and win.stall.bucket_label.text() == "bucket 2 s"
    heights = win.breakdown.columns["compute"].opts["height"]
    low, high = _x_range(win.breakdown.columns_plot)
    assert len(heights) and 1075 <= high <= 1205  # following an ended run shows its last minutes, not a blank
    assert "finished" in win.overview.run.detail.text() and win.overview.throughput.value.text().startswith("final")
    win.zoom_to_last(60.0)
    low, high = _x_range(win.breakdown.columns_plot)
    assert high - low == pytest.approx(60.0, abs=2.0) and not win.time_range.following
    assert clock_text(-30) == "-0:30"


def test_compare_two_runs_overlay_from_the_recording(qtbot: QtBot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    runs = LiveRuns()
    recorder = Recorder(tmp_path / "s.db").start()
    try:
        feed_run([runs, recorder], "ddp-a", "pytorch", "ddp", 4, now - 300, now - 200, stall_s=0.02)
        feed_run([runs, recorder], "tf-b", "tensorflow", "MirroredStrategy", 2, now - 100, now - 10, stall_s=0.2)
        qtbot.waitUntil(lambda: recorder.rows_written >= 6 * 190, timeout=WAIT_MS)
        win = window(runs, recorder=recorder, session_source=lambda: load(recorder.path))
        win.render_frame()
        win.runs_table.select_runs(["ddp-a", "tf-b"])
        assert win.runs_table.compare_button.isEnabled()
        with qtbot.waitSignal(win.runs_table.sig_compare_requested, timeout=5000) as asked:
            win.runs_table.compare_button.click()
        assert asked.args == [["ddp-a", "tf-b"]]
        dialog, job = win.compare_dialog, win.compare_job
        assert dialog is not None and job is not None
        qtbot.waitUntil(lambda: job.done, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: dialog.comparison is not None, timeout=5000)
        assert job.error is None
        names = [line.name() for line in dialog.lines]
        assert names == ["A: ddp-a", "B: tf-b"]  # two labelled series, in the two run colours
        pens = [line.opts["pen"].color().name() for line in dialog.lines]
        assert pens == [c.lower() for c in theme.RUN_COLORS]
        assert all(np.isfinite(line.yData).any() for line in dialog.lines)
        assert "A: ddp-a" in dialog.identity.text() and "B: tf-b" in dialog.identity.text()
        table = {dialog.table_text(r, 0): [dialog.table_text(r, c) for c in range(6)]
                 for r in range(dialog.table.rowCount())}
        step = table["Mean step time (steady)"]
        assert step[3] == "ms" and step[5] in ("A", "B", "same")
        stall = table["AllReduce stall per step"]
        assert stall[3] == "ms" and stall[5] == "A"  # A waits 20 ms a step, B 200 ms: A is better
        assert float(stall[1]) == pytest.approx(20.0, rel=0.05) and float(stall[2]) == pytest.approx(200.0, rel=0.05)
        assert table["Idle share"][3] == "% of step"
        assert "ranks" in dialog.identity.text() and "4 ranks" in dialog.identity.text()
    finally:
        recorder.close()


def test_export_names_the_file_and_gives_it_normal_permissions(qtbot: QtBot, window, two_runs,  # type: ignore[no-untyped-def]
                                                              tmp_path: Path) -> None:
    win = window(two_runs)
    win.render_frame()
    win.runs_table.view.selectRow(win.runs_model.row_of("ddp-a"))  # the user picks the older run
    assert win.selected_run_id == "ddp-a"
    target = tmp_path / "report.html"
    old_umask = os.umask(0o022)
    try:
        outcomes: list[object] = []
        job = win.export_selected_run("html", str(target))
        job.sig_failed.connect(lambda text: outcomes.append(f"failed: {text}"))
        job.sig_finished.connect(outcomes.append)
        qtbot.waitUntil(lambda: bool(outcomes), timeout=WAIT_MS)  # finished or failed: say which
    finally:
        os.umask(old_umask)
    assert not str(outcomes[0]).startswith("failed"), outcomes
    notice = win.status.export_notice
    assert str(target) in notice.label.text() and notice.isVisible()
    assert notice.open_button.isVisible() and notice.folder_button.isVisible()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    page = target.read_text(encoding="utf-8")
    assert "ddp-a" in page and "tf-b" not in page  # the selected run only


def test_a_failed_export_says_why_without_blocking_and_the_window_keeps_working(  # type: ignore[no-untyped-def]
        qtbot: QtBot, window, two_runs, tmp_path: Path) -> None:
    win = window(two_runs)
    win.render_frame()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    failures: list[str] = []
    job = win.export_selected_run("html", str(blocker / "report.html"))  # under a regular file: ENOTDIR, even as root
    job.sig_failed.connect(failures.append)
    qtbot.waitUntil(lambda: bool(failures) or job.done, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: job.failure_box is not None, timeout=WAIT_MS)
    assert failures and "report.html" in failures[0]
    box = job.failure_box
    assert box is not None and box.isVisible() and not box.isModal()  # nothing waits for the user to close it
    assert "report.html" in box.text()
    notice = win.status.export_notice
    assert notice.isVisible() and notice.label.text().startswith("Export failed:")
    assert not notice.open_button.isVisible()
    # the window goes on: frames render and the next export works and replaces the failure notice
    win.render_frame()
    done: list[object] = []
    second = win.export_selected_run("html", str(tmp_path / "ok.html"))
    second.sig_finished.connect(done.append)
    second.sig_failed.connect(lambda text: done.append(f"failed: {text}"))
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    assert not str(done[0]).startswith("failed"), done
    assert (tmp_path / "ok.html").exists() and notice.label.text().startswith("Exported")
    assert notice.open_button.isVisible()
    box.close()


def test_reopen_a_recorded_session_read_only_with_both_runs(qtbot: QtBot, tmp_path: Path) -> None:
    now = time.time()
    path = tmp_path / "two.db"
    recorder = Recorder(path).start()
    feed_run([recorder], "ddp-a", "pytorch", "ddp", 4, now - 600, now - 400)
    feed_run([recorder], "tf-b", "tensorflow", "MirroredStrategy", 2, now - 300, now - 100)
    recorder.close()
    parts = build_viewer(path, preferences=Preferences())
    try:
        win = parts.window
        parts.window.timer.stop()
        qtbot.addWidget(win)
        win.show()
        win.render_frame()
        assert win.runs_model.rowCount() == 2
        rows = {win.runs_model.text(r, 0): win.runs_model.text(r, 3) for r in range(2)}
        assert rows == {"tf-b": "● finished", "ddp-a": "● finished"}
        assert "read-only" in win.windowTitle() and str(path) in win.windowTitle()
        assert not win.action_launch.isEnabled() and "read-only" in win.action_launch.toolTip()
        assert win.selected_run_id == "tf-b"
        assert win.overview.run.value.text() == "tensorflow / MirroredStrategy"
        assert win.status.endpoint.text() == f"read-only: {path}"
        win.runs_table.view.selectRow(win.runs_model.row_of("ddp-a"))
        win.render_frame()
        assert win.overview.run.value.text() == "pytorch / ddp" and "finished 0:03:" in win.overview.run.detail.text()
    finally:
        parts.close()
    assert _with_command(build_parser(), [str(path)]) == ["open", str(path)]  # `ringscope S.db` means open


def test_file_open_in_a_window_opens_a_second_read_only_window(qtbot: QtBot, window, two_runs,  # type: ignore[no-untyped-def]
                                                              tmp_path: Path) -> None:
    now = time.time()
    path = tmp_path / "one.db"
    recorder = Recorder(path).start()
    feed_run([recorder], "old-run", "pytorch", "ddp", 2, now - 100, now - 50)
    recorder.close()
    win = window(two_runs)
    win.sig_open_requested.connect(lambda chosen: gui_app.open_viewer(chosen, Preferences()))
    before = len(gui_app._viewers)
    win.sig_open_requested.emit(str(path))  # what File > Open session… emits once a file is chosen
    qtbot.waitUntil(lambda: len(gui_app._viewers) > before, timeout=WAIT_MS)
    viewer = gui_app._viewers[-1]
    try:
        assert viewer.window is not win and viewer.window.isVisible()
        assert viewer.window.runs_model.rowCount() == 1 and "read-only" in viewer.window.windowTitle()
        assert win.action_open.shortcut().toString() == "Ctrl+O"
    finally:
        viewer.window.close()
    qtbot.waitUntil(lambda: viewer not in gui_app._viewers, timeout=5000)


def test_cards_tell_the_truth_after_the_end_and_for_keras_fit(qtbot: QtBot, window) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    runs = LiveRuns()
    feed_run([runs], "ddp-slow", "pytorch", "ddp", 4, now - 300, now - 200, slow=2, stall_s=0.1)
    win = window(runs)
    win.render_frame()
    snap = win.last_snapshot
    assert snap is not None and snap.ended
    p50, p95, worst = snap.step_pct_s
    assert p50 < p95 < worst  # over every step, not over per-rank means (which would make them all equal)
    cards = win.overview
    assert cards.step_time.value.text() == format_seconds(p50)
    assert f"p95 {format_seconds(p95)}" in cards.step_time.detail.text()
    assert cards.straggler.value.text() == "rank 2" and "final verdict" in cards.straggler.detail.text()
    assert cards.throughput.value.text().startswith("final: ")

    feed_run([runs], "keras-fit", "tensorflow", "MirroredStrategy", 2, now - 100, now, finish=False, fit=True)
    win.refresh_runs()
    assert win.selected_run_id == "keras-fit"  # a new run, and nobody picked one: shown
    win.render_frame()
    assert cards.idle.value.text() == "not measured" and "phases not measured with fit" in cards.idle.detail.text()
    assert cards.cost.value.text() == "not measured"
    assert win.runs_model.text(win.runs_model.row_of("keras-fit"), 8) == "—"  # idle share unknown, not 0
