"""One per-rank metric over time (AllReduce stall or data-loader idle, as a share of step time).

Up to ``MAX_LINES`` ranks: one line per rank, lost ranks grey and dashed. More ranks: a heatmap (ranks x time,
colorbar, grey where there is no data), percentile bands (p5 / p50 / p95 over ranks) and the top-N worst ranks,
because hundreds of lines are noise (shared/UI.md). Past ``HOST_ROWS_ABOVE`` ranks on several hosts the heatmap has
a row per host (the mean of its ranks; hover names its best and worst rank), and the host picker, or a click on a
row, drills down to one host's ranks (``sig_focus_host``: the window shows that host in both timelines and the
ranks table). Owns its plot items only; redrawn from snapshots.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.agent.schema import field_doc
from ringscope.gui.core.live.host_view import HOST_ROWS_ABOVE, HostRuns, focus, host_runs
from ringscope.gui.core.live.store import STATE_LOST, Snapshot
from ringscope.gui.views import theme
from ringscope.gui.views.heat_columns import HeatColumns
from ringscope.gui.views.qt_plot_tools import HoverReadout, same_values, set_range
from ringscope.gui.views.qt_time_range import bucket_note, clock_text, run_seconds, time_plot

MAX_LINES = 32
LEGEND_RANKS = 8  # legend entries named one by one; past this, the first few, "…" and the last
MAX_HOST_BANDS = 64  # more hosts than this: no host lines (they would be closer than a few pixels)
MAX_HOST_LABELS = 12  # up to this many hosts, their names label the rank axis
TOP_N = 8
RECENT_BUCKETS = 10
TOP_INTERVAL_S = 0.25
"""The highest / lowest list is rewritten at most this often (it is read, not watched, like the cards' numbers; at
1 024 ranks rewriting it every heat map render repainted two lists ~30 times a second, 0.8 ms each)."""

METRICS = {
    "comm_exposed": ("AllReduce stall per rank", "heat_comm_exposed_share", field_doc("comm_exposed_s")),
    "data_wait": ("Data-loader idle per rank", "heat_data_wait_share", field_doc("data_wait_s")),
}


class QtRankTimeline(QtWidgets.QWidget):
    """A per-rank share of step time over time; switches from lines to heatmap + bands past 32 ranks."""

    sig_focus_host = QtCore.Signal(object)  # the host the user picked (str), or None for all hosts

    def __init__(self, metric: str) -> None:
        super().__init__()
        title, self._field, doc = METRICS[metric]
        self.metric_name = metric  # not ``metric``: that is QWidget.metric(), which Qt calls (e.g. grab())
        tooltip = (f"{doc}\nShown as a share of each step's time, per time bucket (mean of the steps that ended in "
                   "it; 1 s, wider once a long run outgrew the ring). Hover a line or cell for the rank, time and "
                   "exact value; lost ranks are grey and dashed. Wheel or drag to zoom and pan; double-click to "
                   "follow live.")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        label = QtWidgets.QLabel(f'<span style="color:{theme.PHASE_COLORS[metric]}">&#9632;</span> {title}')
        label.setObjectName("chartTitle")
        label.setToolTip(tooltip)
        header = QtWidgets.QHBoxLayout()
        header.addWidget(label)
        self.bucket_label = QtWidgets.QLabel("")
        self.bucket_label.setObjectName("cardDetail")
        self.bucket_label.setToolTip("The run outgrew the kept buckets: neighbouring buckets were merged, so each "
                                     "point is the mean over this many seconds (the whole run stays visible).")
        header.addWidget(self.bucket_label)
        self.host_box = QtWidgets.QComboBox()
        self.host_box.setToolTip("Show one host's ranks (or click a row of the heat map); the ranks table and the "
                                 "other timeline follow.")
        self.host_box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.host_box.setMaxVisibleItems(24)
        self.host_box.hide()
        self.host_box.activated.connect(self._host_picked)
        header.addWidget(self.host_box)
        self.rank_legend = QtWidgets.QLabel("")  # which line is which rank (lines mode only)
        self.rank_legend.setToolTip("Line color per rank; lost ranks are grey and dashed.")
        # a legend never widens the window: 16 ranks' entries side by side once made it 2 450 px wide at minimum
        self.rank_legend.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.rank_legend.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        header.addWidget(self.rank_legend, 1)  # what is left of the header's width, right-aligned
        layout.addLayout(header)
        self._legend_key: tuple[object, ...] = ()
        self.stack = QtWidgets.QStackedWidget()
        layout.addWidget(self.stack, 1)
        # lines mode
        self.lines_plot = time_plot("share of step", "%", tooltip)
        self.lines_plot.setYRange(0, 100, padding=0.02)
        self.lines: list[pg.PlotDataItem] = []
        self._pens: list[tuple[bool, int] | None] = []  # per line: (lost, ranks) its pen was made for
        self.stack.addWidget(self.lines_plot)
        # heatmap mode
        heat_page = QtWidgets.QWidget()
        grid = QtWidgets.QGridLayout(heat_page)
        grid.setContentsMargins(0, 0, 0, 0)
        self.heat_plot = time_plot("rank", None, tooltip)
        self.no_data = QtWidgets.QGraphicsRectItem()
        self.no_data.setBrush(theme.color(theme.current().no_data))
        self.no_data.setPen(pg.mkPen(None))
        self.no_data.setZValue(-10)
        self.heat_plot.addItem(self.no_data)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.indices = np.zeros((0, 0), np.uint8)  # what the image shows, as indices into ``_lut`` (255: no data)
        self.heat_plot.addItem(self.image)
        colormap = pg.colormap.get(theme.HEAT_COLORMAP)
        self.colorbar = pg.ColorBarItem(values=(0, 100), colorMap=colormap, label="share of step (%)",
                                        interactive=False, width=12)
        # Not linked to the image: the image is drawn from uint8 indices through _LUT (fast path), the bar only
        # shows the same scale. Index 255 is "no data".
        plot_item = self.heat_plot.getPlotItem()
        plot_item.layout.addItem(self.colorbar, 2, 5)
        plot_item.layout.setColumnFixedWidth(4, 5)
        self._lut = np.vstack([colormap.getLookupTable(0.0, 1.0, 255, alpha=True),
                               np.array([[*theme.color(theme.current().no_data).getRgb()]], np.uint8)])
        self.bands_plot = time_plot("p5–95 %", None, "p5, p50 (the thick line) and p95: percentiles over ranks per "
                                    "time bucket: half the ranks are below p50, 5 % of them above p95.")
        self.bands_plot.setYRange(0, 100, padding=0.02)
        self.bands_plot.setMinimumHeight(90)
        self.bands_plot.setMaximumHeight(120)
        # curves, not PlotDataItems: the wrapper's setData costs as much again, three times a heatmap render
        self.p50 = pg.PlotCurveItem([], [], pen=pg.mkPen(theme.PHASE_COLORS[metric], width=2), connect="finite")
        self.p5 = pg.PlotCurveItem([], [], pen=pg.mkPen(theme.PHASE_COLORS[metric], width=1,
                                                        style=QtCore.Qt.PenStyle.DotLine), connect="finite")
        self.p95 = pg.PlotCurveItem([], [], pen=pg.mkPen(theme.PHASE_COLORS[metric], width=1,
                                                         style=QtCore.Qt.PenStyle.DotLine), connect="finite")
        for item in (self.p5, self.p50, self.p95):
            self.bands_plot.addItem(item)
        self.top = QtWidgets.QListWidget()
        self.top.setToolTip(f"The ranks with the highest and the lowest share over the last {RECENT_BUCKETS} buckets "
                            "(for the AllReduce stall, the lowest is the rank the others wait for).")
        self.top.setFixedWidth(170)  # a size hint that follows its text would re-layout the plots every frame
        self.sampling_note = QtWidgets.QLabel("")
        self.sampling_note.setObjectName("cardDetail")
        # a note never widens the window (the charts beside it would be cut off)
        self.sampling_note.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Fixed)
        grid.addWidget(self.sampling_note, 2, 0, 1, 2)
        grid.addWidget(self.heat_plot, 0, 0)
        grid.addWidget(self.top, 0, 1, 2, 1)
        grid.addWidget(self.bands_plot, 1, 0)
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 1)
        self.stack.addWidget(heat_page)
        self.lines_hover = HoverReadout(self.lines_plot, self._describe_line)
        self.heat_hover = HoverReadout(self.heat_plot, self._describe_cell)
        self._snap: Snapshot | None = None
        self._full: Snapshot | None = None  # the last snapshot given, before the drill-down
        self._runs_hosts: tuple[str, ...] | None = None
        self._x = np.zeros(0)
        self._shares = np.zeros((0, 0), np.float32)  # the snapshot's ranks x buckets shares (0..1), not copied
        self._recent_of: np.ndarray | None = None  # the shares ``_recent`` (each rank's recent mean, %) is from
        self._recent = np.zeros(0)
        # Per-bucket results of the last heatmap, by the bucket's stamp (it changes whenever the column does): a
        # frame recomputes only the columns that changed (~1 of 300), not 300 k cells.
        self._cols = HeatColumns()
        self._host_key: tuple[object, ...] = ()  # the host bands drawn (row starts, names); () = none
        self._host_items: list[pg.GraphicsObject] = []
        self._focus: str | None = None  # the host drilled down to (None: every host)
        self._runs = HostRuns(np.zeros(0, np.int64), ())  # the hosts of the full snapshot, in row order
        self._box_names: tuple[str, ...] = ()
        self._by_host: HostRuns | None = None  # the heatmap's rows are these hosts (None: a row per rank)
        self._top_shown_s = -math.inf  # when the highest / lowest list was last rewritten (monotonic)
        self.heat_plot.scene().sigMouseClicked.connect(self._heat_clicked)

    # ---- Public API ----------------------------------------------------------------------------------------------

    @property
    def heatmap_mode(self) -> bool:
        """True when the heatmap (not lines) is shown."""
        return self.stack.currentIndex() == 1

    @property
    def focus_host(self) -> str | None:
        """The host drilled down to, or None when every host is shown."""
        return self._focus

    def set_focus_host(self, host: str | None) -> None:
        """Show only ``host``'s ranks (None: all); redraws the last snapshot at once."""
        if host == self._focus:
            return
        self._focus = host
        self._top_shown_s = -math.inf  # another set of ranks: their list at once
        self._sync_box()
        if self._full is not None:
            self.render(self._full)

    def render(self, snap: Snapshot) -> None:
        """Show one snapshot (only the focused host's ranks while one is picked)."""
        self._full = snap
        if snap.hosts is not self._runs_hosts:
            self._runs_hosts, self._runs = snap.hosts, host_runs(snap.hosts)
            self._sync_box()
        if self._focus is not None:
            if self._focus in self._runs.names:
                snap = focus(snap, self._focus)
            else:  # another run, without that host: every host again (the window tells the other views)
                self._focus = None
                self._sync_box()
                self.sig_focus_host.emit(None)
        self._snap = snap
        self._shares = getattr(snap, self._field)
        self._x = run_seconds(snap)
        note = bucket_note(snap.bucket_s)
        if self.bucket_label.text() != note:
            self.bucket_label.setText(note)
        if len(snap.ranks) > MAX_LINES:
            self.stack.setCurrentIndex(1)
            self._set_rank_legend(snap, heatmap=True)
            self._render_heatmap(snap)
        else:
            self.stack.setCurrentIndex(0)
            self._render_lines(snap)

    @property
    def time_plots(self) -> tuple[pg.PlotWidget, ...]:
        """The charts over run time (the window links their x ranges)."""
        return self.lines_plot, self.heat_plot, self.bands_plot

    def reset(self) -> None:
        """Forget what was drawn (another run is shown now: its bucket stamps mean nothing here)."""
        self._cols = HeatColumns()
        self._legend_key = ()
        self._snap = self._full = None
        self._top_shown_s = -math.inf

    def top_ranks(self, *, lowest: bool = False) -> list[tuple[int, float]]:
        """(rank, share %) of the highest (or lowest) ranks over the last buckets, as the list shows them."""
        if self._snap is None or self._shares.size == 0:
            return []
        if self._recent_of is not self._shares:  # both lists of a frame from one pass over the matrix
            window = 100.0 * self._shares[:, -RECENT_BUCKETS:].astype(np.float64)
            counts = np.sum(np.isfinite(window), axis=1)
            with np.errstate(all="ignore"):
                self._recent = np.where(counts > 0, np.nansum(window, axis=1) / counts, np.nan)
            self._recent_of = self._shares
        recent = self._recent
        has = np.flatnonzero(np.isfinite(recent))  # ranks without data are not "the lowest"
        key = recent[has] if lowest else -recent[has]
        order = has[np.argsort(key, kind="stable")[:TOP_N // 2 if lowest else TOP_N]]
        return list(zip(self._snap.ranks[order].tolist(), recent[order].tolist(), strict=True))

    # ---- Drawing -------------------------------------------------------------------------------------------------

    def _render_lines(self, snap: Snapshot) -> None:
        n = len(snap.ranks)
        while len(self.lines) < n:
            # clipped to the x range shown: a whole run is hundreds of buckets, the live view ~120 of them
            line = pg.PlotDataItem([], [], connect="finite", clipToView=True)
            self.lines_plot.addItem(line)
            self.lines.append(line)
            self._pens.append(None)
        for i, line in enumerate(self.lines):
            if i >= n:
                line.setData([], [])
                continue
            pen_key = (snap.state[i] == STATE_LOST, n)
            if self._pens[i] != pen_key:  # a new pen re-renders the line: only when its rank's state changed
                self._pens[i] = pen_key
                line.setPen(pg.mkPen(theme.LOST_COLOR, width=1, style=QtCore.Qt.PenStyle.DashLine) if pen_key[0]
                            else pg.mkPen(theme.rank_color(i, n), width=1.5))
            line.setData(self._x, 100.0 * self._shares[i].astype(np.float64))
        self._set_rank_legend(snap, heatmap=False)

    def _set_rank_legend(self, snap: Snapshot, *, heatmap: bool) -> None:
        key = (heatmap, tuple(snap.ranks.tolist()), snap.state)
        if key == self._legend_key:
            return  # rich text re-layout is not free: only when ranks or states change
        self._legend_key = key
        if heatmap:
            self.rank_legend.setText("")
            return
        n = len(snap.ranks)
        ranks = snap.ranks.tolist()
        # past LEGEND_RANKS, the first few and the last (the colors run in rank order), then lost ones by name
        shown = range(n) if n <= LEGEND_RANKS else [*range(LEGEND_RANKS - 2), n - 1]
        parts = []
        for i in shown:
            lost = snap.state[i] == STATE_LOST
            color = theme.LOST_COLOR if lost else theme.rank_color(i, n).name()
            parts.append(f'<span style="color:{color}">&#9644;</span>&nbsp;rank&nbsp;{int(ranks[i])}'
                         + (" (lost)" if lost else ""))
        if n > LEGEND_RANKS:
            parts.insert(LEGEND_RANKS - 2, "…")
            lost_hidden = [int(ranks[i]) for i in range(LEGEND_RANKS - 2, n - 1) if snap.state[i] == STATE_LOST]
            if lost_hidden:
                parts.append(f'<span style="color:{theme.LOST_COLOR}">&#9644;</span>&nbsp;lost: '
                             + ", ".join(map(str, lost_hidden[:4])) + (" …" if len(lost_hidden) > 4 else ""))
        self.rank_legend.setText("&nbsp;&nbsp;".join(parts))

    def _render_heatmap(self, snap: Snapshot) -> None:
        n, t = self._shares.shape
        by_host = self._runs if (self._focus is None and n > HOST_ROWS_ABOVE and self._runs.starts.size > 1
                                 and self._runs.rows == n) else None
        self._by_host = by_host
        cols = self._cols.update(snap, self._shares, None if by_host is None else by_host.starts)
        rows = cols.image.shape[0]
        pixels = int(self.heat_plot.getPlotItem().vb.height())
        # more rows than pixels: each pixel row shows the most unusual row of its block, not every n-th row
        self.indices = cols.folded(pixels)
        # coloured here (a 256-entry take): given the LUT, pyqtgraph rebuilds a Qt colour table with a Python call
        # per entry on every image (~0.5 ms a render, twice a frame)
        self.image.setImage(self._lut[self.indices], autoLevels=False, levels=None)
        x0 = float(self._x[0] - snap.bucket_s / 2) if t else 0.0
        rect = QtCore.QRectF(x0, 0, t * snap.bucket_s, rows)
        self.image.setRect(rect)
        self.no_data.setRect(rect)
        set_range(self.heat_plot, y=(0, rows))  # x: the window's TimeRange (linked charts)
        self._draw_host_bands(snap, by_host)
        per_pixel = -(-rows // pixels) if rows > pixels > 0 else 0  # rows folded into one pixel row (0: none)
        if by_host is not None:  # fits under the chart at 1600x1000 (~110 characters)
            note = "host rows = mean of their ranks; " + (
                f"{rows} on {pixels} px, each pixel row the most unusual of {per_pixel}; lists and bands use every "
                "rank" if per_pixel else "hover for exact values")
        else:
            note = (f"{rows} ranks on {pixels} px: a pixel row shows the most unusual of {per_pixel} — hover for "
                    "exact values; lists and bands use every rank") if per_pixel else ""
        if self.sampling_note.text() != note:
            self.sampling_note.setText(note)
            self.sampling_note.setToolTip(note)
        for item, values in zip((self.p5, self.p50, self.p95), cols.percentiles, strict=True):
            # a redraw only for what moved
            if not (same_values(item.xData, self._x) and same_values(item.yData, values)):
                item.setData(self._x, values.copy())  # copied: ``values`` is updated in place at the next frame
        now = time.monotonic()
        if now - self._top_shown_s >= TOP_INTERVAL_S:
            self._top_shown_s = now
            self._show_top()

    def _show_top(self) -> None:
        texts = ["highest:"] + [f"  rank {rank}: {share:.1f} %" for rank, share in self.top_ranks()]
        texts += ["lowest:"] + [f"  rank {rank}: {share:.1f} %" for rank, share in self.top_ranks(lowest=True)]
        if self.top.count() != len(texts):
            self.top.clear()
            self.top.addItems(texts)
            return
        for i, text in enumerate(texts):  # in place: only the rows whose text changed are repainted
            item = self.top.item(i)
            if item.text() != text:
                item.setText(text)

    def _draw_host_bands(self, snap: Snapshot, by_host: HostRuns | None) -> None:
        """A dashed line between the rows of consecutive hosts and, up to ``MAX_HOST_LABELS`` hosts, the hosts'
        names on the rank axis (ranks are rows in rank order, which torchrun and TF_CONFIG fill host by host).
        With a row per host (``by_host``) the axis says so instead."""
        runs = by_host if by_host is not None else (self._runs if snap is self._full else host_runs(snap.hosts))
        banded = by_host is None and 1 < runs.starts.size <= MAX_HOST_BANDS
        key: tuple[object, ...] = ((by_host is not None, tuple(runs.starts.tolist()), runs.names)
                                   if by_host is not None or banded else ())
        if key == self._host_key:
            return
        self._host_key = key
        for item in self._host_items:
            self.heat_plot.removeItem(item)
        self._host_items = []
        axis = self.heat_plot.getPlotItem().getAxis("left")
        bands_axis = self.bands_plot.getPlotItem().getAxis("left")
        labelled = banded and runs.starts.size <= MAX_HOST_LABELS
        if not labelled:
            axis.setTicks(None)
            for each in (axis, bands_axis):
                each.setWidth(None)  # automatic again
        if not banded:
            # short: the chart is ~100 px high at 1600x1000 ("host (mean of its ranks)" was cut to "host (mea");
            # the note under the charts says what a host row is
            self.heat_plot.setLabel("left", "host" if by_host is not None else "rank")
            return
        pen = pg.mkPen(theme.color(theme.current().text), width=1, style=QtCore.Qt.PenStyle.DashLine)
        for start in runs.starts[1:]:
            line = pg.InfiniteLine(pos=float(start), angle=0, pen=pen, movable=False)
            self.heat_plot.addItem(line)
            self._host_items.append(line)
        if not labelled:
            self.heat_plot.setLabel("left", "rank (dashes: hosts)")
            return
        axis.setTicks([[((a + b) / 2, name) for a, b, name in
                        zip(runs.starts.tolist(), runs.ends.tolist(), runs.names, strict=True)]])
        self.heat_plot.setLabel("left", "host")
        # the names widen the axis: the bands chart below gets the same width, so both time axes line up
        width = QtGui.QFontMetrics(axis.style.get("tickFont") or self.font()).horizontalAdvance(
            max(runs.names, key=len)) + 40
        for each in (axis, bands_axis):
            each.setWidth(width)

    def _describe_line(self, x: float, y: float) -> str | None:
        col = self._column(x)
        if col is None or self._snap is None or not len(self._snap.ranks):
            return None
        column = 100.0 * self._shares[:, col].astype(np.float64)
        if not np.isfinite(column).any():
            return f"at {clock_text(self._x[col])}: no data"
        i = int(np.nanargmin(np.abs(column - y)))
        return self._cell_text(i, col)

    def _describe_cell(self, x: float, y: float) -> str | None:
        col = self._column(x)
        row = int(np.floor(y))
        if self._by_host is not None and col is not None:
            return self._host_cell_text(row, col) if 0 <= row < len(self._by_host.names) else None
        if col is None or self._snap is None or not 0 <= row < len(self._snap.ranks):
            return None
        return self._cell_text(row, col)

    def _host_cell_text(self, row: int, col: int) -> str:
        """A host row of the by-host heatmap: its mean, and its lowest and highest rank in that bucket."""
        assert self._snap is not None and self._by_host is not None
        start, end = int(self._by_host.starts[row]), int(self._by_host.ends[row])
        values = 100.0 * self._shares[start:end, col].astype(np.float64)
        ranks = self._snap.ranks[start:end]
        head = (f"host {self._by_host.names[row]}: ranks {int(ranks[0])}–{int(ranks[-1])}\n"
                f"at {clock_text(self._x[col])} since run start ({self._snap.bucket_s:g} s bucket)\n")
        if not np.isfinite(values).any():
            return head + "no data"
        low, high = int(np.nanargmin(values)), int(np.nanargmax(values))
        name = METRICS[self.metric_name][0].split(" per")[0]
        return (head + f"{name}: mean {np.nanmean(values):.1f} % of step over {int(np.isfinite(values).sum())} "
                f"ranks\nlowest: rank {int(ranks[low])} {values[low]:.1f} %, highest: rank {int(ranks[high])} "
                f"{values[high]:.1f} %\nclick: show this host's ranks")

    def _heat_clicked(self, event: Any) -> None:  # a pyqtgraph MouseClickEvent
        """A click on a heatmap row drills down to that row's host (double-click still means "follow live")."""
        if self._snap is None or event.button() != QtCore.Qt.MouseButton.LeftButton:
            return
        view = self.heat_plot.getPlotItem().vb
        scene_pos = event.scenePos()
        if not view.sceneBoundingRect().contains(scene_pos) or self._focus is not None:
            return
        row = int(np.floor(view.mapSceneToView(scene_pos).y()))
        if self._by_host is not None:
            host = self._by_host.names[row] if 0 <= row < len(self._by_host.names) else None
        else:
            host = self._snap.hosts[row] if 0 <= row < len(self._snap.hosts) else None
        if host is not None and len(self._runs.names) > 1:
            self._pick(host)

    def _host_picked(self, index: int) -> None:
        self._pick(None if index <= 0 else self._box_names[index - 1])

    def _pick(self, host: str | None) -> None:
        self.set_focus_host(host)
        self.sig_focus_host.emit(host)

    def _sync_box(self) -> None:
        """The host picker lists the hosts of the full snapshot (shown when there are several) and the focus."""
        names = tuple(dict.fromkeys(self._runs.names))  # a host split over runs of rows is listed once
        if names != self._box_names:
            self._box_names = names
            self.host_box.blockSignals(True)
            self.host_box.clear()
            self.host_box.addItem(f"all {len(names)} hosts")
            self.host_box.addItems(list(names))
            self.host_box.blockSignals(False)
        self.host_box.setVisible(len(names) > 1)
        index = 0 if self._focus is None or self._focus not in names else names.index(self._focus) + 1
        if self.host_box.currentIndex() != index:
            self.host_box.blockSignals(True)
            self.host_box.setCurrentIndex(index)
            self.host_box.blockSignals(False)

    def _cell_text(self, row: int, col: int) -> str:
        assert self._snap is not None
        value = 100.0 * float(self._shares[row, col])
        shown = "no data" if not np.isfinite(value) else f"{value:.1f} % of step"
        state = self._snap.state[row]
        host = self._snap.hosts[row] if row < len(self._snap.hosts) else ""
        return (f"rank {int(self._snap.ranks[row])} ({state}){' on ' + host if host else ''}\n"
                f"at {clock_text(self._x[col])} since run start "
                f"({self._snap.bucket_s:g} s bucket)\n"
                f"{METRICS[self.metric_name][0].split(' per')[0]}: {shown}")

    def _column(self, x: float) -> int | None:
        if self._x.size == 0 or self._snap is None:
            return None
        col = int(np.argmin(np.abs(self._x - x)))
        return col if abs(self._x[col] - x) <= self._snap.bucket_s else None
