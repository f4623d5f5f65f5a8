"""Two runs of the session side by side, in the window: the step breakdown of both (A and B labelled, in two run
colours) and the table of differences that ``ringscope compare`` prints
(``ringscope.gui.core.analysis.compare.compare``).

``compare_runs_work`` is what runs on a worker thread (analysis of two whole runs takes seconds);
``QtRunCompare`` only draws a finished ``Comparison``. Phase colours stay the phase colours: the runs are told
apart by their labels and by their own two colours (``theme.RUN_COLORS``) where they share a chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.analysis.compare import Comparison, MetricDelta, compare
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.report import build_report
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.views import theme
from ringscope.gui.views.qt_plot_tools import format_seconds, label_rows, make_plot, set_range
from ringscope.gui.views.qt_time_range import RunTimeAxis

TABLE_COLUMNS = ("figure", "A", "B", "unit", "B vs A", "better")


def compare_runs_work(load: Callable[[Sequence[str]], list[SessionData]], run_ids: Sequence[str],
                      price_per_gpu_hour: float | None) -> Callable[[], Comparison]:
    """The worker's job: load both runs (``load`` gets the two run ids), analyze, price and compare them."""
    first, second = run_ids

    def work() -> Comparison:
        data_a, data_b = load([first, second])
        report_a = build_report(data_a, price_per_gpu_hour)
        report_b = build_report(data_b, price_per_gpu_hour)
        return compare(report_a, report_b, first, second)

    return work


class QtRunCompare(QtWidgets.QDialog):
    """The comparison overlay (non-modal): identity of A and B, both breakdowns, step time over both runs, deltas."""

    def __init__(self, run_ids: Sequence[str], parent: QtWidgets.QWidget | None = None, *,
                 source_note: str = "") -> None:
        super().__init__(parent)
        self.run_ids = list(run_ids)
        self.source_note = source_note
        self.comparison: Comparison | None = None
        self.setWindowTitle(f"Compare runs — A: {run_ids[0]}  vs  B: {run_ids[1]}")
        self.resize(1280, 860)
        layout = QtWidgets.QVBoxLayout(self)
        self.identity = QtWidgets.QLabel(self._identity_html(None))
        self.identity.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.identity)
        self.status = QtWidgets.QLabel("Analyzing both runs…" + (f" ({source_note})" if source_note else ""))
        self.status.setObjectName("cardDetail")
        layout.addWidget(self.status)
        legend = QtWidgets.QLabel(theme.legend_html())
        legend.setToolTip("\n".join(f"{p.label}: {p.description}" for p in PHASES))
        layout.addWidget(legend)
        charts = QtWidgets.QHBoxLayout()
        self.bars_plot = make_plot("run", None, "mean step time (steady state), stacked by phase", "s",
                                   "Each run's mean steady-state step, split into its phases.")
        self.bars = {p.name: pg.BarGraphItem(x0=[], y=[], width=[], height=0.6, brush=p.color, pen=None)
                     for p in PHASES}
        for item in self.bars.values():
            self.bars_plot.addItem(item)
        self.unmeasured = pg.BarGraphItem(x0=[], y=[], width=[], height=0.6, brush=theme.LOST_COLOR, pen=None)
        self.bars_plot.addItem(self.unmeasured)
        self.bar_labels = [pg.TextItem("", color=color, anchor=(0, 0.5)) for color in theme.RUN_COLORS]
        for label in self.bar_labels:
            self.bars_plot.addItem(label)
        self.lines_plot = make_plot("step time", "s", "time since run start", "m:ss",
                                    "Mean step time per time bucket over each whole run (A and B in their colours).",
                                    axis_items={"bottom": RunTimeAxis("bottom")})
        self.lines_plot.getPlotItem().getAxis("bottom").enableAutoSIPrefix(False)
        self.lines_plot.setMouseEnabled(x=True, y=False)
        self.lines_legend = self.lines_plot.getPlotItem().addLegend(offset=(10, 10))
        self.lines = [pg.PlotDataItem([], [], pen=pg.mkPen(color, width=2, style=style), connect="finite",
                                      name=name)
                      for color, style, name in zip(theme.RUN_COLORS,
                                                    (QtCore.Qt.PenStyle.SolidLine, QtCore.Qt.PenStyle.DashLine),
                                                    (f"A: {run_ids[0]}", f"B: {run_ids[1]}"), strict=True)]
        for line in self.lines:
            self.lines_plot.addItem(line)
        charts.addWidget(self.bars_plot, 1)
        charts.addWidget(self.lines_plot, 1)
        layout.addLayout(charts, 1)
        self.table = QtWidgets.QTableWidget(0, len(TABLE_COLUMNS))
        self.table.setHorizontalHeaderLabels(TABLE_COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(21)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        for column, width in enumerate((260, 110, 110, 90, 110)):
            self.table.setColumnWidth(column, width)
        layout.addWidget(self.table, 1)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def show_comparison(self, comparison: Comparison) -> None:
        """Draw a finished comparison."""
        self.comparison = comparison
        self.identity.setText(self._identity_html(comparison))
        self.status.setText("Steady-state figures (warm-up steps left out)" + (f", {self.source_note}" if
                            self.source_note else "") + "; \"better\" ignores differences under 1 %.")
        self._draw_bars(comparison)
        self._draw_lines(comparison)
        self._fill_table(comparison.metrics)

    def show_error(self, text: str) -> None:
        """The comparison could not be made: say why."""
        self.status.setText(text.split("\n\n")[0])
        self.status.setStyleSheet(f"color: {theme.ALERT_COLOR};")

    def table_text(self, row: int, column: int) -> str:
        """A cell of the delta table."""
        item = self.table.item(row, column)
        return item.text() if item is not None else ""

    # ---- Drawing -------------------------------------------------------------------------------------------------

    def _identity_html(self, comparison: Comparison | None) -> str:
        rows = []
        for number, run_id in enumerate(self.run_ids):
            color = theme.RUN_COLORS[number]
            detail = ""
            if comparison is not None:
                analysis = (comparison.a, comparison.b)[number].analysis
                detail = (f" — {analysis.framework} / {analysis.strategy}, {len(analysis.ranks)} ranks, "
                          f"{analysis.steps_total:,} steps over {_duration(analysis.duration_s)}")
            rows.append(f'<span style="color:{color}; font-weight:600">&#9644; {"AB"[number]}: {run_id}</span>'
                        f"{detail}")
        return "<br>".join(rows)

    def _draw_bars(self, comparison: Comparison) -> None:
        reports = (comparison.a, comparison.b)
        y = np.array([1.5, 0.5])  # A on top
        left = np.zeros(2)
        measured = np.array([r.analysis.overall.phases_measured for r in reports])
        for phase in PHASES:
            width = np.array([r.analysis.overall.seconds[phase.name] if ok else 0.0
                              for r, ok in zip(reports, measured, strict=True)])
            self.bars[phase.name].setOpts(x0=left.copy(), y=y, width=width, height=0.6)
            left = left + width
        steps = np.array([r.analysis.overall.step_s for r in reports])
        self.unmeasured.setOpts(x0=np.zeros(int((~measured).sum())), y=y[~measured], width=steps[~measured],
                                height=0.6)
        for number, (label, report) in enumerate(zip(self.bar_labels, reports, strict=True)):
            note = "" if measured[number] else " (phases not measured with fit)"
            label.setText(f"{'AB'[number]}: {format_seconds(report.analysis.overall.step_s)}{note}")
            label.setPos(float(steps[number]) if math.isfinite(steps[number]) else 0.0, float(y[number]))
        widest = float(np.nanmax(steps)) if np.isfinite(steps).any() else 1.0
        set_range(self.bars_plot, x=(0.0, widest * 1.6 if widest > 0 else 1.0), y=(0.0, 2.0))
        label_rows(self.bars_plot, "left", [1.5, 0.5], ["A", "B"])

    def _draw_lines(self, comparison: Comparison) -> None:
        longest = 1.0
        for line, report in zip(self.lines, (comparison.a, comparison.b), strict=True):
            timeline = report.analysis.timeline
            x = np.asarray(timeline.start_s, dtype=np.float64) + timeline.bucket_s / 2.0
            line.setData(x, np.asarray(timeline.step_s, dtype=np.float64))
            if x.size:
                longest = max(longest, float(x[-1] + timeline.bucket_s / 2.0))
        tallest = [np.nanmax(r.analysis.timeline.step_s) for r in (comparison.a, comparison.b)
                   if np.isfinite(r.analysis.timeline.step_s).any()]
        self.lines_plot.setXRange(0.0, longest, padding=0.02)
        # headroom above the lines for the legend (top left)
        self.lines_plot.setYRange(0.0, float(max(tallest)) * 1.45 if tallest else 1.0, padding=0)

    def _fill_table(self, metrics: Sequence[MetricDelta]) -> None:
        self.table.setRowCount(len(metrics))
        better_colors = {"A": theme.RUN_COLORS[0], "B": theme.RUN_COLORS[1]}
        for row, metric in enumerate(metrics):
            cells = (metric.label, _number(metric.a), _number(metric.b), metric.unit or "count", metric.direction,
                     metric.better if metric.lower_is_better is not None else "—")
            for column, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                if column in (1, 2):
                    item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
                if column == 5 and text in better_colors:
                    item.setForeground(QtGui.QBrush(QtGui.QColor(better_colors[text])))
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                if column == 0 and metric.lower_is_better is not None:
                    item.setToolTip("lower is better" if metric.lower_is_better else "higher is better")
                self.table.setItem(row, column, item)


def _number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.1f}"


def _duration(seconds: float) -> str:
    whole = max(0, int(seconds))
    return f"{whole // 3600:d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
