"""Step-time breakdown: stacked columns over time (TensorBoard's step-time graph) and per-rank stacked horizontal
bars (Holistic Trace Analysis' temporal breakdown), in the one phase palette, with a legend that says it once.

Owns its plot items only; redrawn from snapshots. Missing phases are not drawn as zero: a bucket without data has
no column, a rank without recent steps has no bar.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets

from ringscope.gui.core.live.store import PHASES, STATE_LOST, Snapshot
from ringscope.gui.views import theme
from ringscope.gui.views.qt_plot_tools import Bars, HoverReadout, format_seconds, label_rows, make_plot, set_range
from ringscope.gui.views.qt_time_range import bucket_note, clock_text, run_seconds, time_plot

MANY_RANKS = 256
MANY_RANKS_REDRAW_S = 0.25  # per-rank bars are means of the last 20 steps (~2 s): 4 redraws a second follow them


class QtStepBreakdown(QtWidgets.QWidget):
    """Stacked columns (cluster mean per 1 s bucket) and per-rank stacked bars (mean of the last steps)."""

    def __init__(self) -> None:
        super().__init__()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        header = QtWidgets.QHBoxLayout()
        title = QtWidgets.QLabel("Step-time breakdown")
        title.setObjectName("chartTitle")
        self.legend = QtWidgets.QLabel(theme.legend_html())
        self.legend.setToolTip("\n".join(f"{theme.PHASE_LABELS[p]}: {theme.PHASE_DESCRIPTIONS[p]}" for p in PHASES))
        self.bucket_label = QtWidgets.QLabel("")
        self.bucket_label.setObjectName("cardDetail")
        self.bucket_label.setToolTip("The run outgrew the kept buckets: neighbouring buckets were merged, so each "
                                     "column is the mean over this many seconds (the whole run stays visible).")
        header.addWidget(title)
        header.addWidget(self.bucket_label)
        header.addStretch(1)
        header.addWidget(self.legend)
        layout.addLayout(header)
        row = QtWidgets.QHBoxLayout()
        self.columns_plot = time_plot("step time", "s", "Mean over ranks of the steps that ended in each time bucket "
                                                        "(1 s, wider once a long run outgrew the ring), stacked by "
                                                        "phase. Wheel or drag to zoom and pan; double-click to "
                                                        "follow live.")
        self.columns = {p: Bars(x=[], height=[], width=0.8, brush=theme.PHASE_COLORS[p], pen=None)
                        for p in PHASES}
        for item in self.columns.values():
            self.columns_plot.addItem(item)
        self.step_line = pg.PlotDataItem([], [], pen=pg.mkPen(theme.current().plot_foreground, width=1),
                                         connect="finite")
        self.columns_plot.addItem(self.step_line)
        self.ranks_plot = make_plot("rank", None, "mean step time (last 20 steps)", "s",
                                    "One bar per rank, stacked by phase: the odd rank jumps out.")
        self.bars = {p: Bars(x0=[], y=[], width=[], height=0.8, brush=theme.PHASE_COLORS[p], pen=None)
                     for p in PHASES}
        for item in self.bars.values():
            self.ranks_plot.addItem(item)
        self.marker = pg.TextItem("", color=theme.STRAGGLER_COLOR, anchor=(0, 0.5))
        self.ranks_plot.addItem(self.marker)
        row.addWidget(self.columns_plot, 3)
        row.addWidget(self.ranks_plot, 2)
        layout.addLayout(row)
        self.columns_hover = HoverReadout(self.columns_plot, self._describe_column)
        self.ranks_hover = HoverReadout(self.ranks_plot, self._describe_rank)
        self._snap: Snapshot | None = None
        self._x = np.zeros(0)
        self._rank_phases: dict[str, np.ndarray] = {}
        self._ranks_drawn: tuple[float, object, object] = (-np.inf, None, None)  # now_s, ranks, straggler row

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render(self, snap: Snapshot) -> None:
        """Show one snapshot."""
        self._snap = snap
        self._x = run_seconds(snap)
        note = bucket_note(snap.bucket_s)
        if self.bucket_label.text() != note:
            self.bucket_label.setText(note)
        cluster = snap.cluster_phase_s
        has = np.isfinite(cluster["step"])
        base = np.zeros(int(has.sum()))
        for phase in PHASES:
            height = np.nan_to_num(cluster[phase][has])
            self.columns[phase].setOpts(x=self._x[has], y0=base.copy(), height=height, width=0.8 * snap.bucket_s)
            base = base + height
        self.step_line.setData(self._x, cluster["step"])
        low, high = self.columns_plot.getPlotItem().vb.viewRange()[0]  # the window's TimeRange sets x
        shown = cluster["step"][(self._x >= low) & (self._x <= high)]
        tallest = float(np.nanmax(shown)) if np.isfinite(shown).any() else 1.0
        # a rounded y range: autorange would follow every step's jitter and re-layout the axes each frame
        set_range(self.columns_plot, y=(0.0, _nice_ceiling(tallest * 1.1)))
        drawn_s, drawn_ranks, drawn_straggler = self._ranks_drawn
        if (len(snap.ranks) <= MANY_RANKS or not 0 <= snap.now_s - drawn_s < MANY_RANKS_REDRAW_S
                or (drawn_ranks is not snap.ranks and not np.array_equal(drawn_ranks, snap.ranks))
                or drawn_straggler != snap.straggler_row()):
            self._ranks_drawn = (snap.now_s, snap.ranks, snap.straggler_row())
            self._render_ranks(snap)

    def reset(self) -> None:
        """Forget what was drawn (another run is shown now)."""
        self._ranks_drawn = (-np.inf, None, None)
        self._snap = None

    # ---- Drawing -------------------------------------------------------------------------------------------------

    def _render_ranks(self, snap: Snapshot) -> None:
        other = snap.recent_step_s - np.nan_to_num(snap.recent_data_wait_s) - np.nan_to_num(snap.recent_compute_s) \
            - np.nan_to_num(snap.recent_comm_exposed_s)
        self._rank_phases = {"data_wait": snap.recent_data_wait_s, "compute": snap.recent_compute_s,
                             "comm_exposed": snap.recent_comm_exposed_s, "other": np.maximum(other, 0.0)}
        has = np.isfinite(snap.recent_step_s)
        y = np.arange(len(snap.ranks), dtype=float)[has] + 0.5
        left = np.zeros(int(has.sum()))
        lost = (np.array(snap.state) == STATE_LOST)[has] if STATE_LOST in snap.state else np.zeros(int(has.sum()), bool)
        height = 0.8 if len(snap.ranks) <= 64 else 1.0  # thin gaps between hundreds of bars alias into stripes
        for phase in PHASES:
            width = np.nan_to_num(self._rank_phases[phase][has])
            if lost.any():
                brushes = [theme.LOST_COLOR if gone else theme.PHASE_COLORS[phase] for gone in lost]
                self.bars[phase].setOpts(x0=left.copy(), y=y, width=width, height=height, brushes=brushes)
            else:  # one brush for all bars: building a brush per bar per frame is the slow part
                self.bars[phase].setOpts(x0=left.copy(), y=y, width=width, height=height, brushes=None,
                                         brush=theme.PHASE_COLORS[phase])
            left = left + width
        row = snap.straggler_row()
        if row is not None and np.isfinite(snap.recent_step_s[row]):
            self.marker.setText("◀ straggler")
            self.marker.setPos(float(snap.recent_step_s[row]), row + 0.5)
        else:
            self.marker.setText("")
        n = max(len(snap.ranks), 1)
        widest = float(np.nanmax(snap.recent_step_s)) if has.any() else 1.0
        # round the x range up so it does not move with every step's jitter
        set_range(self.ranks_plot, x=(0, _nice_ceiling(widest * 1.5)), y=(0, n))
        label_rows(self.ranks_plot, "left", (np.arange(len(snap.ranks)) + 0.5).tolist(),
                   [str(int(r)) for r in snap.ranks])

    def _describe_column(self, x: float, y: float) -> str | None:
        if self._snap is None or self._x.size == 0:
            return None
        col = int(np.argmin(np.abs(self._x - x)))
        cluster = self._snap.cluster_phase_s
        if abs(self._x[col] - x) > self._snap.bucket_s or not np.isfinite(cluster["step"][col]):
            return "no steps in this bucket"
        lines = [f"at {clock_text(self._x[col])} since run start ({self._snap.bucket_s:g} s bucket), mean over ranks",
                 f"step: {format_seconds(cluster['step'][col])}"]
        lines += [f"{theme.PHASE_LABELS[p]}: {format_seconds(cluster[p][col])}" for p in PHASES]
        return "\n".join(lines)

    def _describe_rank(self, x: float, y: float) -> str | None:
        if self._snap is None:
            return None
        row = int(np.floor(y))
        if not 0 <= row < len(self._snap.ranks):
            return None
        lines = [f"rank {int(self._snap.ranks[row])} ({self._snap.state[row]})",
                 f"step: {format_seconds(self._snap.recent_step_s[row])}"]
        lines += [f"{theme.PHASE_LABELS[p]}: {format_seconds(self._rank_phases[p][row])}" for p in PHASES]
        return "\n".join(lines)


def _nice_ceiling(value: float) -> float:
    """Round up to a few "nice" multiples of a power of ten, so ranges change only when the data really moved."""
    if not np.isfinite(value) or value <= 0:
        return 1.0
    scale = 10 ** np.floor(np.log10(value))
    for step in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if value <= step * scale:
            return float(step * scale)
    return float(10 * scale)
