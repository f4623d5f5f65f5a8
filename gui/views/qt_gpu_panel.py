"""Per-GPU utilization and memory: nvtop-like bars now, and the series over time. CPU when there is no GPU.

With up to ``MAX_LINES`` GPUs every GPU gets a line; beyond that the series becomes a median line with a p5-p95
band (1 s bins), because hundreds of lines are noise. Owns its plot items only; redrawn from snapshots.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

from ringscope.agent.schema import field_doc
from ringscope.gui.core.live.gpu_summary import SUMMARY_ABOVE, WINDOW_S, summarize
from ringscope.gui.core.live.snapshot import GpuSummary
from ringscope.gui.core.live.store import Snapshot
from ringscope.gui.views import theme
from ringscope.gui.views.qt_plot_tools import Bars, HoverReadout, label_rows, make_plot, set_range
from ringscope.gui.views.qt_time_range import clock_text, run_origin, time_plot

MAX_LINES = SUMMARY_ABOVE  # more GPUs than this: the store's summary (median and p5-p95 band), not a line each
MAX_PAIRED_BARS = 32
MANY_REDRAW_S = 0.25  # past MAX_LINES GPUs: each GPU samples at ~2 Hz, so 4 redraws a second show every sample
NO_GPU_TEXT = "No GPU on this host — showing CPU"
UTIL_TOOLTIP = field_doc("util_pct") + " (share of time some kernel ran, not SM occupancy)"


class QtGpuPanel(QtWidgets.QWidget):
    """Bars (utilization and memory per GPU, red when idle) and utilization over time."""

    def __init__(self) -> None:
        super().__init__()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        header = QtWidgets.QHBoxLayout()
        self.title = QtWidgets.QLabel("GPU utilization and memory")
        self.title.setObjectName("chartTitle")
        self.title.setToolTip(UTIL_TOOLTIP)
        self.notice = QtWidgets.QLabel(NO_GPU_TEXT)
        self.notice.setObjectName("notice")
        self.notice.setVisible(False)
        header.addWidget(self.title)
        header.addStretch(1)
        header.addWidget(QtWidgets.QLabel(f'<span style="color:{theme.PHASE_COLORS["compute"]}">&#9632;</span> '
                                          f'utilization (<span style="color:{theme.ALERT_COLOR}">&#9632;</span> '
                                          f'&lt; {theme.IDLE_UTIL_PCT:.0f} %) &nbsp; '
                                          '<span style="color:#9c755f">&#9632;</span> memory used'))
        header.addWidget(self.notice)
        layout.addLayout(header)
        row = QtWidgets.QHBoxLayout()
        self.bars_plot = make_plot("latest", "%", "GPU", None, UTIL_TOOLTIP)
        self.bars_plot.setYRange(0, 100, padding=0.02)
        # Every bar in util_bars; the idle ones drawn again on top in red. Two one-brush items are drawn with one
        # drawRects call each, where a brush per bar is a Python fillRect per bar (1024 GPUs: ~10 ms a repaint).
        self.util_bars = Bars(x=[], height=[], width=0.4, brush=theme.PHASE_COLORS["compute"], pen=None)
        self.idle_bars = Bars(x=[], height=[], width=0.4, brush=theme.ALERT_COLOR, pen=None)
        self.mem_bars = Bars(x=[], height=[], width=0.4, brush="#9c755f", pen=None)
        self.bars_plot.addItem(self.util_bars)
        self.bars_plot.addItem(self.idle_bars)
        self.bars_plot.addItem(self.mem_bars)
        self.series_plot = time_plot("utilization", "%", UTIL_TOOLTIP + f"\nThe window keeps the last readings "
                                     f"of each device (about {WINDOW_S * 5 // 60} min at 2 per second); with more "
                                     f"than {MAX_LINES} GPUs, the median and p5-p95 of the last {WINDOW_S} s.")
        self.series_plot.setYRange(0, 100, padding=0.02)
        self.band_low = pg.PlotDataItem([], [])
        self.band_high = pg.PlotDataItem([], [])
        self.band = pg.FillBetweenItem(self.band_low, self.band_high,
                                       brush=theme.color(theme.PHASE_COLORS["compute"], 70))
        self.series_plot.addItem(self.band)
        self.lines: list[pg.PlotDataItem] = []
        row.addWidget(self.bars_plot, 2)
        row.addWidget(self.series_plot, 3)
        layout.addLayout(row)
        self.bars_hover = HoverReadout(self.bars_plot, self._describe_bar)
        self.series_hover = HoverReadout(self.series_plot, self._describe_series)
        self._snap: Snapshot | None = None
        self._bar_names: list[str] = []
        self._bar_values: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))  # utilization, memory %
        self._short_names: tuple[list[str], list[str]] = ([], [])  # (names, their axis labels)
        self._labels_for_cpu: bool | None = None
        self._names_key: tuple[tuple[str, int, int | None], ...] = ()
        self._names: list[str] = []
        self._band_shown = False  # the median line and p5-p95 band (many GPUs) are drawn, not a line per GPU

    # ---- Public API ----------------------------------------------------------------------------------------------

    @property
    def showing_cpu(self) -> bool:
        """True when the panel shows CPU because no host has a GPU."""
        return not self.notice.isHidden()

    def render(self, snap: Snapshot) -> None:
        """Show one snapshot (skipped when no device sample arrived and the time axis moved less than 1 s, and
        at most every ``MANY_REDRAW_S`` with more than ``MAX_LINES`` GPUs)."""
        if self._snap is not None:
            since = snap.now_s - self._snap.now_s
            unchanged = (snap.gpus is self._snap.gpus and snap.host_states is self._snap.host_states
                         and snap.gpu_summary is self._snap.gpu_summary)
            if (unchanged and since < 1.0) or (len(snap.gpus) > MAX_LINES and 0 <= since < MANY_REDRAW_S):
                return
        self._snap = snap
        no_gpu = snap.no_gpu
        if no_gpu != self._labels_for_cpu:  # axis labels re-layout the plot and drop the axis cache: only on change
            self._labels_for_cpu = no_gpu
            self.notice.setVisible(no_gpu)
            self.title.setText("CPU utilization (no GPU)" if no_gpu else "GPU utilization and memory")
            self.series_plot.getPlotItem().setLabel("left", "CPU" if no_gpu else "utilization", units="%")
            self.bars_plot.getPlotItem().setLabel("bottom", "host" if no_gpu else "GPU")
        if no_gpu:
            names = [h.host for h in snap.host_states]
            util = [float(h.cpu_pct[-1]) if h.cpu_pct.size else np.nan for h in snap.host_states]
            mem = [100.0 * h.mem_used_bytes / h.mem_total_bytes if h.mem_total_bytes else np.nan
                   for h in snap.host_states]
            series = [(h.ts_s, h.cpu_pct) for h in snap.host_states]
        else:
            gpus = snap.gpus
            # names change only when GPUs appear: formatting 1024 of them every redraw costs ~2 ms
            key = tuple((g.host, g.gpu_index, g.rank) for g in gpus)
            if key != self._names_key:
                self._names_key = key
                self._names = [f"{host}:{index}" + (f" (rank {rank})" if rank is not None else "")
                               for host, index, rank in key]
            names = self._names
            summary = snap.gpu_summary
            if summary is None:  # few GPUs: a line each, figures from their series
                summary = summarize(gpus, snap.ended_s if snap.ended else snap.now_s)
            util, mem = summary.util_pct, summary.mem_pct
            series = [(g.ts_s, g.util_pct) for g in gpus] if len(gpus) <= MAX_LINES else []
        self._render_bars(names, np.array(util, float), np.array(mem, float))
        origin = run_origin(snap)
        if no_gpu or len(snap.gpus) <= MAX_LINES:
            self._render_lines(series, origin)
        else:
            self._render_band(summary, origin)

    # ---- Drawing -------------------------------------------------------------------------------------------------

    def _render_bars(self, names: list[str], util: np.ndarray, mem: np.ndarray) -> None:
        self._bar_names = names
        self._bar_values = (util, mem)
        if names is not self._short_names[0]:  # the same list while no GPU appears: 1024 labels cost ~1 ms
            self._short_names = (names, [_short_name(n) for n in names])
        x = np.arange(len(names), dtype=float)
        set_range(self.bars_plot, x=(-0.6, max(len(names), 1) - 0.4))
        label_rows(self.bars_plot, "bottom", x.tolist(), self._short_names[1], max_labels=16)
        ok = np.isfinite(util)
        idle = ok & (np.nan_to_num(util, nan=100.0) < theme.IDLE_UTIL_PCT)
        if len(names) > MAX_PAIRED_BARS:  # past this, paired bars merge into a block: utilization only
            # width 1: sub-pixel gaps between hundreds of bars alias into black stripes
            self.util_bars.setOpts(x=x[ok], height=util[ok], width=1.0)
            self.idle_bars.setOpts(x=x[idle], height=util[idle], width=1.0)
            self.mem_bars.setOpts(x=[], height=[], width=0.4)
            return
        self.util_bars.setOpts(x=x[ok] - 0.2, height=util[ok], width=0.4)
        self.idle_bars.setOpts(x=x[idle] - 0.2, height=util[idle], width=0.4)
        okm = np.isfinite(mem)
        self.mem_bars.setOpts(x=x[okm] + 0.2, height=mem[okm], width=0.4)

    def reset(self) -> None:
        """Forget what was drawn (another run is shown now)."""
        self._snap = None

    def _render_lines(self, series: list[tuple[np.ndarray, np.ndarray]], origin: float) -> None:
        """A line per GPU (or host) over run time (``origin``: the run's start, Unix s)."""
        while len(self.lines) < len(series):
            pen = pg.mkPen(theme.rank_color(len(self.lines), MAX_LINES), width=1.5)
            line = pg.PlotDataItem([], [], pen=pen, connect="finite")
            self.series_plot.addItem(line)
            self.lines.append(line)
        for line in self.lines[len(series):]:
            line.setData([], [])
        if self._band_shown:
            self._band_shown = False
            self._set_band(np.zeros(0), np.zeros(0), np.zeros(0))
        for i, (line, (ts, values)) in enumerate(zip(self.lines, series, strict=False)):
            line.setPen(pg.mkPen(theme.rank_color(i, MAX_LINES), width=1.5))
            line.setData((ts - origin).astype(np.float64), values)

    def _render_band(self, summary: GpuSummary, origin: float) -> None:
        """Many GPUs: the median line and the p5-p95 band of the last ``WINDOW_S`` seconds (built by the store)."""
        if not self._band_shown:  # from a line per GPU: those lines go, the first one becomes the median
            for line in self.lines[1:]:
                line.setData([], [])
            if not self.lines:
                line = pg.PlotDataItem([], [], connect="finite")
                self.series_plot.addItem(line)
                self.lines.append(line)
            self.lines[0].setPen(pg.mkPen(theme.PHASE_COLORS["compute"], width=2))
            self._band_shown = True
        low, mid, high = summary.band
        x = np.arange(-WINDOW_S, 0, dtype=np.float64) + 0.5 + (summary.end_s - origin)
        self.lines[0].setData(x, mid)
        self._set_band(x, np.nan_to_num(low), np.nan_to_num(high))

    def _set_band(self, x: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        """Both edges of the band, with one rebuild of the fill between them (each edge's change rebuilds it)."""
        self.band_low.blockSignals(True)
        try:
            self.band_low.setData(x, low)
        finally:
            self.band_low.blockSignals(False)
        self.band_high.setData(x, high)
        if not x.size:  # an empty edge only hides its curve, which keeps its path: the fill would stay drawn
            self.band.setPath(QtGui.QPainterPath())

    def _describe_bar(self, x: float, y: float) -> str | None:
        i = round(x)
        if not 0 <= i < len(self._bar_names):
            return None
        util, mem = float(self._bar_values[0][i]), float(self._bar_values[1][i])
        what = "CPU" if self.showing_cpu else "utilization"
        return (f"{self._bar_names[i]}\n{what}: {'no data' if np.isnan(util) else f'{util:.1f} %'}\n"
                f"memory used: {'no data' if np.isnan(mem) else f'{mem:.1f} %'}")

    def _describe_series(self, x: float, y: float) -> str | None:
        if self._snap is None:
            return None
        return f"at {clock_text(x)} since run start\nvalue at cursor {y:.1f} %"


def _short_name(name: str) -> str:
    """A bar's axis label: the GPU index (or host name for CPU bars); the full name is in the hover text."""
    host, _, rest = name.partition(":")
    return rest.split(" ")[0] if rest else host[:12]
