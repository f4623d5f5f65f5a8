"""Views that redo only what changed between frames still show exactly what a full redraw would."""

from __future__ import annotations

import re

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6 import QtCore

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, Step
from ringscope.gui.core.live.gpu_summary import WINDOW_S, bin_series
from ringscope.gui.core.live.host_view import fold_rows
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.views.heat_columns import HeatColumns
from ringscope.gui.views.qt_gpu_panel import MAX_LINES, QtGpuPanel
from ringscope.gui.views.qt_plot_tools import Bars, make_plot
from ringscope.gui.views.qt_rank_timeline import TOP_INTERVAL_S, QtRankTimeline
from ringscope.gui.views.qt_ranks_table import COLUMNS, RanksTableModel

T0 = 1_700_000_000.0


def _steps(store: LiveStore, ranks: list[int], end: float, k: int, rng: np.random.Generator) -> None:
    records = []
    for r in ranks:
        step_s = 0.1 + 0.02 * rng.random()
        data = None if rng.random() < 0.1 else 0.03 * rng.random()  # some steps without a data-wait reading
        records.append(Step(r, k, end - step_s, end, step_s, data, 0.05, 0.04, 0.04 * rng.random(), 32))
    store.on_batch(wire.decode(wire.encode("a", k, end, records)), end)


def _full(snap, field: str) -> HeatColumns:  # type: ignore[no-untyped-def]
    return HeatColumns().update(snap, getattr(snap, field))


@pytest.mark.parametrize("metric", ["comm_exposed", "data_wait"])
def test_heatmap_updated_column_by_column_equals_a_full_redraw(qtbot, metric: str) -> None:  # type: ignore[no-untyped-def]
    view = QtRankTimeline(metric)
    qtbot.addWidget(view)
    store = LiveStore(bucket_s=1.0, buckets=30)
    rng = np.random.default_rng(7)
    ranks = list(range(40))  # past MAX_LINES: heatmap mode
    t = T0
    for frame in range(90):
        t += 0.35  # ~3 frames a bucket: the time axis moves every few frames
        k = frame + 1
        present = ranks if frame < 60 else [*ranks, 40]  # a rank joins: rows change shape
        _steps(store, present, t, k, rng)
        if frame % 17 == 5:
            _steps(store, ranks[:5], t - 6.0, k, rng)  # late steps into an older bucket
        snap = store.snapshot(now_s=t + 0.05)
        view.render(snap)
        assert view.heatmap_mode
        full = _full(snap, view._field)
        np.testing.assert_array_equal(view._cols.image, full.image)
        np.testing.assert_array_equal(view._cols.has_data, full.has_data)
        np.testing.assert_array_equal(view._cols.percentiles, full.percentiles)
        for curve, values in zip((view.p5, view.p50, view.p95), full.percentiles, strict=True):
            # the curves show this frame's percentiles, in arrays of their own (the columns change in place, and
            # a curve that held them would look unchanged and never be redrawn)
            np.testing.assert_array_equal(curve.yData, values)
            assert not np.shares_memory(curve.yData, view._cols.percentiles)
        # more rows than pixels: the fold, kept column by column too, equals folding the whole image
        typical = np.rint(np.nan_to_num(full.percentiles[1], nan=0.0) * 2.54)
        np.testing.assert_array_equal(view._cols.folded(7), fold_rows(full.image, 7, typical))
    # the hover still reads exact values from the snapshot
    shares = getattr(snap, view._field)
    row, col = 3, int(np.flatnonzero(np.isfinite(shares[3]))[-1])
    assert f"{100.0 * float(shares[row, col]):.1f} % of step" in view._cell_text(row, col)


def test_heatmap_marks_host_bands_and_names_hosts_on_its_rank_axis(qtbot) -> None:  # type: ignore[no-untyped-def]
    from ringscope.agent.schema import Hello

    view = QtRankTimeline("comm_exposed")
    qtbot.addWidget(view)
    store = LiveStore(bucket_s=1.0, buckets=30)
    for host in range(4):  # 4 hosts x 10 ranks, one agent per host
        ranks = list(range(10 * host, 10 * host + 10))
        hello = Hello("r", f"a{host}", f"node-{host}", 1, ranks[0], 0, 40, host, ranks, "pytorch", "ddp", "gloo", [],
                      "0.1.0", "1.0", T0, 0.0, T0)
        store.on_batch(wire.decode(wire.encode(f"a{host}", 0, T0, [hello])), T0)
    rng = np.random.default_rng(1)
    _steps(store, list(range(40)), T0 + 1.0, 1, rng)
    view.render(store.snapshot(now_s=T0 + 1.1))
    assert view.heatmap_mode
    lines = sorted(item.value() for item in view._host_items)
    assert lines == [10.0, 20.0, 30.0]  # a dashed line where each next host's rows start
    ticks = view.heat_plot.getPlotItem().getAxis("left")._tickLevels
    assert ticks == [[(5.0, "node-0"), (15.0, "node-1"), (25.0, "node-2"), (35.0, "node-3")]]
    assert "on node-2" in view._cell_text(25, 0)


def _bin_reference(series: list[tuple[np.ndarray, np.ndarray]], now: float) -> np.ndarray:
    out = np.full((len(series), WINDOW_S), np.nan)
    for g, (ts, values) in enumerate(series):
        for b in range(WINDOW_S):
            lo = now - WINDOW_S + b
            inside = (ts >= lo) & (ts < lo + 1) & np.isfinite(values)
            if inside.any():
                out[g, b] = values[inside].mean()
    return out


def test_gpu_bins_from_window_tails_equal_binning_every_reading() -> None:
    rng = np.random.default_rng(3)
    now = T0 + 500.0
    series = []
    for _ in range(12):
        n = int(rng.integers(0, 700))
        ts = np.sort(now - 300.0 * rng.random(n))  # readings before, in and at the edges of the window
        values = 100.0 * rng.random(n)
        values[rng.random(n) < 0.1] = np.nan  # unsupported readings
        series.append((ts, values))
    np.testing.assert_allclose(bin_series(series, now), _bin_reference(series, now), equal_nan=True)


def test_table_answers_its_roles_and_shows_new_values_without_a_reset(qtbot) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore(bucket_s=1.0, buckets=30)
    rng = np.random.default_rng(1)
    for k in range(25):
        _steps(store, list(range(6)), T0 + 0.1 * k, k, rng)
    model = RanksTableModel()
    model.set_snapshot(store.snapshot(now_s=T0 + 3))
    resets: list[int] = []
    changed: list[tuple[int, int]] = []
    model.modelReset.connect(lambda: resets.append(1))
    model.dataChanged.connect(lambda a, b: changed.append((a.row(), b.row())))
    for k in range(25, 50):
        _steps(store, list(range(6)), T0 + 0.1 * k, k, rng)
    snap = store.snapshot(now_s=T0 + 5.5)
    model.set_snapshot(snap)
    assert not resets and changed == [(0, 5)]
    role = QtCore.Qt.ItemDataRole
    for row in range(6):
        r = model.snapshot_row(row)
        assert model.data(model.index(row, 4), role.DisplayRole) == f"{int(snap.current_step[r]):,}"
        assert model.data(model.index(row, 5), int(role.DisplayRole)) == f"{1000.0 * snap.recent_step_s[r]:.1f}"
        assert model.data(model.index(row, 5), role.UserRole) == pytest.approx(1000.0 * snap.recent_step_s[r])
        assert model.data(model.index(row, 1), role.DecorationRole) is None
        assert model.data(model.index(row, 1), role.SizeHintRole) is None
    assert model.columnCount() == len(COLUMNS)


def test_a_many_rank_legend_is_short_and_never_widens_the_window(qtbot) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    rng = np.random.default_rng(1)
    for k in range(3):
        _steps(store, list(range(16)), 1.7e9 + k * 0.1, k, rng)
    view = QtRankTimeline("comm_exposed")
    qtbot.addWidget(view)
    view.render(store.snapshot(now_s=1.7e9 + 1))
    text = view.rank_legend.text()
    shown = [int(rank) for rank in re.findall(r"rank&nbsp;(\d+)", text)]
    assert shown == [0, 1, 2, 3, 4, 5, 15] and "…" in text, text
    assert view.minimumSizeHint().width() < 600  # 16 entries side by side made the window 2 450 px wide


def _gpu_store(gpus: int, end: float) -> LiveStore:
    store = LiveStore(bucket_s=1.0, buckets=30)
    _steps(store, list(range(gpus)), end, 1, np.random.default_rng(3))
    samples = [GpuSample(end - 60.0 + s, "node-a", i, rank=i, util_pct=float((7 * i + s) % 100),
                         mem_used_bytes=(i + 1) * 2**30, mem_total_bytes=80 * 2**30)
               for s in range(60) for i in range(gpus)]
    store.on_batch(wire.decode(wire.encode("a", 2, end, samples)), end)
    return store


def test_gpu_panel_band_and_lines_replace_each_other_with_nothing_left_over(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Many GPUs draw the store's median and p5-p95 band; few GPUs a line each. The band's edges are set with one
    rebuild of its fill, and switching modes leaves nothing of the other drawn."""
    panel = QtGpuPanel()
    qtbot.addWidget(panel)
    few, many = _gpu_store(3, T0).snapshot(now_s=T0), _gpu_store(MAX_LINES + 12, T0).snapshot(now_s=T0)
    assert many.gpu_summary is not None and few.gpu_summary is None
    fills = []
    panel.band_high.sigPlotChanged.connect(lambda *_: fills.append(panel.band.path().elementCount()))
    for snap in (many, few, many):
        panel.reset()
        before = len(fills)
        panel.render(snap)
        drawn = [line for line in panel.lines if line.yData is not None and line.yData.size]
        if snap is many:
            low, mid, high = snap.gpu_summary.band
            assert len(drawn) == 1  # the median, not a line per GPU
            np.testing.assert_array_equal(drawn[0].yData, mid)
            np.testing.assert_array_equal(panel.band_low.yData, np.nan_to_num(low))
            np.testing.assert_array_equal(panel.band_high.yData, np.nan_to_num(high))
            assert len(fills) == before + 1 and fills[-1] > 0  # one rebuild of the fill, from both new edges
            assert panel.band.path().boundingRect().height() > 0
        else:
            assert len(drawn) == 3  # a line each
            assert all(edge.yData is None or edge.yData.size == 0 for edge in (panel.band_low, panel.band_high))
            assert panel.band.path().isEmpty()


def test_bars_keep_their_bounds_only_until_the_data_or_the_view_changes(qtbot) -> None:  # type: ignore[no-untyped-def]
    widget = make_plot("y", None, "x", None)
    qtbot.addWidget(widget)
    widget.resize(400, 300)
    widget.show()
    bars = Bars(x=[0, 1, 2], height=[10, 20, 30], width=0.8, brush="r", pen=None)
    widget.addItem(bars)
    widget.setXRange(-1, 3, padding=0)
    widget.setYRange(0, 40, padding=0)
    qtbot.waitExposed(widget)

    def uncached() -> QtCore.QRectF:
        return pg.BarGraphItem.boundingRect(bars)

    assert bars.boundingRect() == uncached()
    bars.setOpts(x=[0, 1, 2, 5], height=[10, 20, 30, 90], width=0.8)
    assert bars.boundingRect() == uncached()
    assert bars.boundingRect().bottom() >= 90
    wide = bars.boundingRect()
    widget.setYRange(0, 400, padding=0)  # pixels are larger in data units: the pen's padding grows
    QtCore.QCoreApplication.processEvents()
    assert bars.boundingRect() == uncached() != wide


def test_the_highest_and_lowest_list_is_rewritten_a_few_times_a_second(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The list is read, not watched: a render within ``TOP_INTERVAL_S`` of the last rewrite leaves it, a later one
    rewrites it (in place) from the frame it draws."""
    view = QtRankTimeline("comm_exposed")
    qtbot.addWidget(view)
    store = LiveStore(bucket_s=1.0, buckets=30)
    rng = np.random.default_rng(11)
    ranks = list(range(40))
    for k in range(3):
        _steps(store, ranks, T0 + k, k + 1, rng)
    view.render(store.snapshot(now_s=T0 + 3))
    shown = [view.top.item(i).text() for i in range(view.top.count())]
    expected = [f"  rank {rank}: {share:.1f} %" for rank, share in view.top_ranks()]
    assert shown[0] == "highest:" and shown[1:1 + len(expected)] == expected
    _steps(store, ranks, T0 + 3.5, 4, rng)  # new shares
    view.render(store.snapshot(now_s=T0 + 3.6))
    assert [view.top.item(i).text() for i in range(view.top.count())] == shown  # too soon: the list stays
    view._top_shown_s -= TOP_INTERVAL_S  # as if a quarter of a second had passed
    view.render(store.snapshot(now_s=T0 + 3.7))
    fresh = [f"  rank {rank}: {share:.1f} %" for rank, share in view.top_ranks()]
    assert [view.top.item(i).text() for i in range(1, 1 + len(fresh))] == fresh != expected
