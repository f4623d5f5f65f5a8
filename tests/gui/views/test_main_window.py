"""The main window over a real store fed by real records: builds, switches modes, says "no GPU", greys lost ranks."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6 import QtCore, QtGui

from ringscope.agent import wire
from ringscope.agent.schema import GpuStatus, Hello, HostSample, Step
from ringscope.gui.core.live.store import STATE_LOST, LiveStore
from ringscope.gui.views import theme
from ringscope.gui.views.qt_gpu_panel import NO_GPU_TEXT
from ringscope.gui.views.qt_main_window import QtMainWindow
from ringscope.gui.views.qt_preferences import Preferences
from ringscope.gui.views.qt_ranks_table import RanksTableModel


def _feed(store: LiveStore, ranks: int, steps: int = 12, *, slow: int | None = None) -> None:
    now = time.time()
    for r in range(ranks):
        hello = Hello("run", f"a{r}", f"host{r // 8}", 1, r, 0, ranks, 0, [r], "simulated", "simulated", None, [],
                      "0.1.0", "1.0", now, 0.0, now - 10)
        store.on_batch(wire.decode(wire.encode(f"a{r}", 0, now, [hello])), now)
    for k in range(steps):
        end = now - (steps - k) * 0.5
        records = [Step(r, k, end - 0.1, end, 0.1, 0.01, 0.05, 0.03, 0.001 if r == slow else 0.03, 32)
                   for r in range(ranks)]
        for r, rec in enumerate(records):
            store.on_batch(wire.decode(wire.encode(f"a{r}", k + 1, now, [rec])), now)


@pytest.fixture
def window(qtbot):  # type: ignore[no-untyped-def]
    def make(store: LiveStore) -> QtMainWindow:
        win = QtMainWindow(store, endpoint="tcp://127.0.0.1:1", preferences=Preferences(price_per_gpu_hour=2.0))
        win.timer.stop()  # tests drive frames themselves
        qtbot.addWidget(win)
        win.show()
        return win
    return make


def test_window_builds_and_renders_an_empty_store(window) -> None:  # type: ignore[no-untyped-def]
    win = window(LiveStore())
    snap = win.render_frame()
    assert snap.ranks.size == 0
    assert win.ranks_model.rowCount() == 0
    assert win.overview.throughput.value.text() == "no data"
    assert not win.grab().isNull()


def test_the_throughput_card_says_measuring_until_a_second_of_steps_is_complete(window) -> None:  # type: ignore[no-untyped-def]
    # 8 192 simulated ranks' first frame said "samples/s not reported" and "0.0 steps/s" while they stepped
    for _ in range(3):  # the frame must be drawn within the second its step ended in (a loaded machine may miss it)
        store = LiveStore()  # 1 s buckets
        win = window(store)
        win.render_frame()
        time.sleep(1.02 - time.time() % 1.0)  # just past a second's start
        now = time.time()
        hello = Hello("run", "a0", "host0", 1, 0, 0, 1, 0, [0], "simulated", "simulated", None, [], "0.1.0", "1.0",
                      now, 0.0, now - 10)
        store.on_batch(wire.decode(wire.encode("a0", 0, now, [hello])), now)
        step = Step(0, 0, now - 0.1, now, 0.1, 0.01, 0.05, 0.03, 0.03, 32)
        store.on_batch(wire.decode(wire.encode("a0", 1, now, [step])), now)
        win.render_frame()
        if int(time.time()) == int(now):
            break
    else:
        pytest.fail("no frame was drawn within the second of its step in 3 tries")
    card = win.overview.throughput
    assert card.value.text() == "measuring" and "1 step(s) received" in card.detail.text()


def test_few_ranks_draw_lines_table_and_straggler(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    _feed(store, 4, slow=2)
    win = window(store)
    win.render_frame()
    assert not win.stall.heatmap_mode
    drawn = [line for line in win.stall.lines if line.xData is not None and len(line.xData)]
    assert len(drawn) == 4
    y = drawn[0].yData
    assert np.nanmax(y) == pytest.approx(30.0, rel=1e-3)  # 0.03 s of a 0.1 s step, in %
    assert win.ranks_model.rowCount() == 4
    assert win.overview.straggler.value.text() == "rank 2"
    straggler_cell = win.ranks_model.index(2, 0)
    assert "straggler" in win.ranks_model.data(straggler_cell)
    assert win.breakdown.bars["compute"].opts["width"][0] == pytest.approx(0.05)
    assert "rank" in (win.stall.lines_hover.text_at(float(win.stall._x[-1]), 30.0) or "")
    assert win.gpu_panel.bars_hover is not None


def test_many_ranks_switch_to_heatmap_bands_and_top_list(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    _feed(store, 40, slow=7)
    win = window(store)
    win.render_frame()
    assert win.stall.heatmap_mode and win.data_idle.heatmap_mode
    image = win.stall.indices  # uint8 indices into the heat LUT; 255 = no data
    np.testing.assert_array_equal(win.stall.image.image, win.stall._lut[image])  # drawn in the LUT's colours
    assert image.shape[0] == 40
    assert (image == 255).any()  # buckets before the first step are drawn as "no data", not as 0
    assert image[image != 255].max() == round(30.0 * 2.54)  # 0.03 s of a 0.1 s step = 30 %
    no_data = QtGui.QColor(theme.current().no_data)  # the theme's quiet grey, not the colormap's 0
    assert tuple(win.stall._lut[255][:3]) == (no_data.red(), no_data.green(), no_data.blue())
    assert tuple(win.stall._lut[255][:3]) != tuple(win.stall._lut[0][:3])
    assert win.stall.top.count() > 0
    assert np.isfinite(win.stall.p50.yData).any()
    text = win.stall.heat_hover.text_at(float(win.stall._x[-2]), 7.5)
    assert text is not None and text.startswith("rank 7")


def test_no_gpu_message_and_lost_rank_greyed(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore(lost_timeout_s=0.3)
    _feed(store, 2, steps=3)
    host = HostSample(time.time(), "host0", 20.0, 1, 2, None, None, 0, GpuStatus.NO_GPU, "NVML not found")
    store.on_batch(wire.decode(wire.encode("a0", 50, time.time(), [host])), time.time())
    win = window(store)
    win.render_frame()
    assert win.gpu_panel.showing_cpu and win.gpu_panel.notice.text() == NO_GPU_TEXT
    time.sleep(0.5)
    win.render_frame()
    model = win.ranks_model
    assert model.data(model.index(0, 2)) == STATE_LOST
    assert model.data(model.index(0, 0), RanksTableModel.SortRole) == 0
    assert "lost" in win.overview.run.detail.text()


def test_table_sorts_numerically(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    _feed(store, 12)
    win = window(store)
    win.render_frame()
    table = win.ranks_table
    table.sortByColumn(0, table.horizontalHeader().sortIndicatorOrder().DescendingOrder)
    first = table.model().index(0, 0).data(RanksTableModel.SortRole)
    assert first == 11  # numeric sort, not "9" > "11"


def test_table_sorts_by_numbers_in_the_model_and_keeps_the_selection(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    _feed(store, 12, slow=5)  # rank 5's stall is the smallest
    win = window(store)
    win.render_frame()
    table, model = win.ranks_table, win.ranks_model
    assert table.model() is model  # no proxy: the model sorts itself with numpy
    table.selectRow(3)
    table.sortByColumn(7, QtCore.Qt.SortOrder.AscendingOrder)  # stall (ms)
    assert model.data(model.index(0, 0), RanksTableModel.SortRole) == 5
    stalls = [model.data(model.index(row, 7), RanksTableModel.SortRole) for row in range(12)]
    assert stalls == sorted(stalls)
    selected = table.selectionModel().selectedRows()
    assert [model.data(i, RanksTableModel.SortRole) for i in selected] == [3]  # the same rank, in its new row
    assert model.snapshot_row(0) == 5


def test_many_ranks_charts_take_turns_within_the_budget_and_text_is_not_rewritten(window) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    _feed(store, 300, steps=4)
    win = window(store)
    win.render_frame()
    assert win.charts_last_tick == 4  # the first frame draws everything
    assert QtGui.QPixmapCache.cacheLimit() >= 64 * 1024  # the axes' caches fit (see qt_plot_tools.make_plot)
    counts = []
    for k in range(6):
        store.on_batch(wire.decode(wire.encode("a0", 100 + k, time.time(), [
            Step(0, 20 + k, time.time() - 0.1, time.time(), 0.1, 0.01, 0.05, 0.03, 0.03, 32)])), time.time())
        win.render_frame()
        counts.append(win.charts_last_tick)
    assert all(1 <= c <= 4 for c in counts)
    text = win.overview.run.detail.text()
    win.overview.run.detail.setText("sentinel")
    win._last_text_render = time.monotonic()  # text was just drawn and nothing it keys on changed: kept
    win.render_frame()
    assert win.overview.run.detail.text() == "sentinel"
    win._last_text_render = 0.0  # its 4 Hz turn (the table's turn is not now): rewritten
    win._last_table_render = time.monotonic()
    store.on_batch(wire.decode(wire.encode("a1", 200, time.time(), [
        Step(1, 30, time.time() - 0.1, time.time(), 0.1, 0.01, 0.05, 0.03, 0.03, 32)])), time.time())
    win.render_frame()
    assert win.overview.run.detail.text() != "sentinel" and "300 ranks" in win.overview.run.detail.text()
    assert "300 ranks" in text


def test_thousands_of_ranks_draw_a_row_per_host_and_a_host_drills_down_to_its_ranks(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from ringscope.gui.core.live.host_view import HOST_ROWS_ABOVE

    ranks = HOST_ROWS_ABOVE + 88  # 75 hosts of 8
    store = LiveStore()
    _feed(store, ranks, steps=4, slow=13)
    win = window(store)
    win.render_frame()
    stall = win.stall
    assert stall.heatmap_mode and stall.image.image.shape[0] == ranks // 8  # a row per host
    assert stall.heat_plot.getPlotItem().getAxis("left").labelText == "host"
    assert stall.sampling_note.text().startswith("host rows = mean of their ranks")
    # hover over host1's row names its ranks, their mean and the rank the others wait for (the lowest stall)
    text = stall.heat_hover.text_at(float(stall._x[-2]), 1.5)
    assert text is not None and text.startswith("host host1: ranks 8–15") and "lowest: rank 13 1.0 %" in text
    assert "mean 26.4 %" in text  # (7 x 30 % + 1 %) / 8 = 26.375
    assert stall.host_box.isVisible() and stall.host_box.count() == 76
    listed = [stall.top.item(i).text() for i in range(stall.top.count())]
    assert listed[listed.index("lowest:") + 1] == "  rank 13: 1.0 %"  # the top and bottom lists name ranks

    # a click on host 4's row (where the user sees it) shows its ranks: both timelines and the ranks table
    view = win.data_idle.heat_plot.getPlotItem().vb
    scene = view.mapViewToScene(QtCore.QPointF(float(win.data_idle._x[-2]), 4.5))
    qtbot.mouseClick(win.data_idle.heat_plot.viewport(), QtCore.Qt.MouseButton.LeftButton,
                     pos=win.data_idle.heat_plot.mapFromScene(scene))
    assert stall.focus_host == win.data_idle.focus_host == "host4"
    win.render_frame()
    assert not stall.heatmap_mode  # 8 ranks: a line each
    assert len([line for line in stall.lines if line.xData is not None and len(line.xData)]) == 8
    assert win.ranks_model.rowCount() == 8 and win.ranks_dock.windowTitle() == "Ranks on host4"
    assert [int(win.ranks_model.data(win.ranks_model.index(i, 0))) for i in range(8)] == list(range(32, 40))
    assert stall.host_box.currentText() == "host4"
    win.ranks_table.sortByColumn(7, QtCore.Qt.SortOrder.DescendingOrder)  # sorting keeps to the host's ranks
    assert win.ranks_model.rowCount() == 8
    assert sorted(int(win.ranks_model.data(win.ranks_model.index(i, 0))) for i in range(8)) == list(range(32, 40))

    stall.host_box.setCurrentIndex(0)  # "all 75 hosts", as the user picks it
    stall.host_box.activated.emit(0)
    win.render_frame()
    assert stall.focus_host is None and win.ranks_model.rowCount() == ranks
    assert stall.image.image.shape[0] == ranks // 8 and win.ranks_dock.windowTitle() == "Ranks"
