"""Time charts over a run: the run-time x axis (``m:ss`` / ``h:mm:ss`` since the run started), the x range every
time chart of the window shares (``TimeRange``: follow live, or stay where the user zoomed / panned), and the
"Follow live / Whole run" bar.

Owns no telemetry: it maps a snapshot's buckets to seconds since the run started and keeps one x range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from ringscope.gui.views.qt_plot_tools import make_plot

FOLLOW_WINDOW_S = 120.0
"""Seconds a time chart shows while it follows the run live."""
_TIME_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def run_origin(snap: Any) -> float:
    """Where a run's time axis starts (Unix s): its earliest agent's start, else its first bucket, else now."""
    if np.isfinite(snap.started_s):
        return float(snap.started_s)
    starts = snap.bucket_start_s[np.isfinite(snap.bucket_start_s)]
    return float(starts[0]) if starts.size else float(snap.now_s)


def run_end(snap: Any) -> float:
    """Seconds since the run started up to now, or up to its end once it ended (where "live" stops)."""
    end = snap.ended_s if snap.ended else snap.now_s
    return max(0.0, float(end) - run_origin(snap))


def run_seconds(snap: Any) -> np.ndarray:
    """Bucket centres as seconds since the run started, float64 (fast clipping).

    Buckets not used yet have no time: they are laid out before the first used one, so axes stay sane.
    """
    x = (snap.bucket_start_s + snap.bucket_s / 2.0 - run_origin(snap)).astype(np.float64)
    if x.size and not np.isfinite(x).all():
        known = np.flatnonzero(np.isfinite(x))
        if known.size:
            x = x[known[0]] + (np.arange(x.size, dtype=np.float64) - known[0]) * snap.bucket_s
        else:
            x = (np.arange(x.size, dtype=np.float64) - x.size + 0.5) * snap.bucket_s + run_end(snap)
    return x


def clock_text(seconds: float) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above (negative before the run started)."""
    sign = "-" if seconds < 0 else ""
    whole = round(abs(float(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours}:{minutes:02d}:{secs:02d}" if hours else f"{sign}{minutes}:{secs:02d}"


def bucket_note(bucket_s: float) -> str:
    """Says that a chart shows coarser buckets than 1 s (a run that outgrew the ring); empty at 1 s."""
    if not np.isfinite(bucket_s) or bucket_s <= 1.0:
        return ""
    return f"bucket {bucket_s:g} s" if bucket_s < 120 else f"bucket {bucket_s / 60:g} min"


class RunTimeAxis(pg.AxisItem):
    """A bottom axis in run time: ticks at whole seconds / minutes / hours, labelled ``m:ss`` or ``h:mm:ss``."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N803
        span = maxVal - minVal
        if not np.isfinite(span) or span <= 0:
            return super().tickSpacing(minVal, maxVal, size)
        wanted = max(2.0, size / 90.0)  # a label needs ~90 px
        major = next((s for s in _TIME_STEPS_S if span / s <= wanted), _TIME_STEPS_S[-1])
        minor = next((s for s in reversed(_TIME_STEPS_S) if s < major and major % s == 0), major / 2)
        return [(float(major), 0.0), (float(minor), 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [clock_text(v) for v in values]


def time_plot(left: str, left_units: str | None, tooltip: str = "") -> pg.PlotWidget:
    """A chart over run time: ``make_plot`` with the run-time axis, x panning and zooming with the mouse."""
    widget = make_plot(left, left_units, "time since run start", "m:ss", tooltip,
                       axis_items={"bottom": RunTimeAxis("bottom")})
    widget.getPlotItem().getAxis("bottom").enableAutoSIPrefix(False)
    widget.setMouseEnabled(x=True, y=False)
    return widget


class TimeRange(QtCore.QObject):
    """The x range every time chart of the window shares: follows the run live, or stays where the user put it.

    Following: the last ``FOLLOW_WINDOW_S`` seconds of the run (the first ones fill from the left; an ended run
    keeps showing its last seconds, or all of it when it was shorter). Any zoom or pan with the mouse (wheel,
    drag) stops following; ``follow(True)`` (the "Follow live" button, or a double-click on a chart) starts again.
    A zoom in one chart is a zoom in all.
    """

    sig_follow_changed = QtCore.Signal(bool)
    """Following was switched on (True) or off (False), by the user or by code."""

    def __init__(self, window_s: float = FOLLOW_WINDOW_S) -> None:
        super().__init__()
        self.window_s = window_s
        self.following = True
        self.plots: list[pg.PlotWidget] = []
        self._applied: tuple[float, float] | None = None
        self._end_s = 0.0
        self._pad_s = 0.5
        self._ended = False

    def attach(self, plot: pg.PlotWidget) -> None:
        """Share this chart's x range with the others; its mouse zoom / pan and double-click steer following.

        Not pyqtgraph's ``setXLink``: that lines views up on screen (for plots stacked above each other), so side by
        side charts of different widths would show different times.
        """
        self.plots.append(plot)
        plot.getPlotItem().vb.sigRangeChangedManually.connect(lambda *_a, p=plot: self._moved_by_user(p))
        plot.scene().sigMouseClicked.connect(self._clicked)
        if self._applied is not None:
            plot.setXRange(*self._applied, padding=0)

    def follow(self, on: bool = True) -> None:
        """Follow the run live (True) or keep the current range (False)."""
        changed = on != self.following
        self.following = on
        if on:
            self._applied = None
            self._apply(self._live_range())
        if changed:
            self.sig_follow_changed.emit(on)

    def update(self, end_s: float, bucket_s: float, ended: bool = False) -> None:
        """A new frame: the run has reached ``end_s`` seconds since its start (its end once over: ``ended``)."""
        self._ended = ended
        self._end_s = end_s if np.isfinite(end_s) else 0.0
        self._pad_s = bucket_s / 2.0 if np.isfinite(bucket_s) else 0.5
        if self.following:
            self._apply(self._live_range())

    def show_whole_run(self) -> None:
        """The whole run, start to now (stops following)."""
        self.follow(False)
        self._apply((0.0, max(self._end_s, 1.0) + self._pad_s))

    def show_last(self, seconds: float) -> None:
        """The last ``seconds`` of the run (stops following: the range stays while the run goes on)."""
        self.follow(False)
        self._apply((self._end_s - seconds, self._end_s + self._pad_s))

    def visible(self) -> tuple[float, float]:
        """The x range shown now (seconds since run start)."""
        if not self.plots:
            return self._live_range()
        low, high = self.plots[0].getPlotItem().vb.viewRange()[0]
        return float(low), float(high)

    # ---- Internals -------------------------------------------------------------------------------------------

    def _live_range(self) -> tuple[float, float]:
        # moved in whole buckets (at least 1 s), not every frame: a new range re-renders every linked axis
        if self._ended:  # nothing comes after the end: its last minutes, or the whole run when shorter
            return max(0.0, self._end_s - self.window_s), max(self._end_s, 1.0) + self._pad_s
        step = max(1.0, 2.0 * self._pad_s)
        end = float(np.ceil(self._end_s / step) * step)
        low = max(0.0, end - self.window_s)
        return low, low + self.window_s + self._pad_s

    def _apply(self, x_range: tuple[float, float], *, skip: pg.PlotWidget | None = None) -> None:
        if x_range == self._applied:
            return
        self._applied = x_range
        for plot in self.plots:
            if plot is not skip:
                plot.setXRange(*x_range, padding=0)

    def _moved_by_user(self, plot: pg.PlotWidget) -> None:
        if self.following:
            self.following = False
            self.sig_follow_changed.emit(False)
        low, high = plot.getPlotItem().vb.viewRange()[0]
        self._apply((float(low), float(high)), skip=plot)  # the other charts show the same time

    def _clicked(self, event: Any) -> None:
        if event.double():
            self.follow(True)


class QtHistoryBar(QtWidgets.QWidget):
    """"[Follow live] [Whole run]  how to zoom": one control for every time chart of the window."""

    def __init__(self, time_range: TimeRange) -> None:
        super().__init__()
        self.time_range = time_range
        bar = QtWidgets.QHBoxLayout(self)
        bar.setContentsMargins(0, 4, 0, 0)
        self.follow_button = QtWidgets.QToolButton()
        self.follow_button.setText("Follow live")
        self.follow_button.setCheckable(True)
        self.follow_button.setChecked(time_range.following)
        self.follow_button.setToolTip(f"On: the charts show the last {time_range.window_s / 60:g} minutes of the run "
                                      "and move with it. A zoom or pan with the mouse turns it off; this button or a "
                                      "double-click on a chart turns it back on.")
        self.follow_button.toggled.connect(time_range.follow)
        time_range.sig_follow_changed.connect(self._follow_changed)
        self.whole_button = QtWidgets.QToolButton()
        self.whole_button.setText("Whole run")
        self.whole_button.setToolTip("Show the run from its start (the charts keep its whole history, in coarser "
                                     "buckets once it is long: each chart says its bucket width)")
        self.whole_button.clicked.connect(time_range.show_whole_run)
        hint = QtWidgets.QLabel("Charts: time since the run started · wheel to zoom, drag to pan, double-click to "
                                "follow live again")
        hint.setObjectName("cardDetail")
        bar.addWidget(self.follow_button)
        bar.addWidget(self.whole_button)
        bar.addWidget(hint, 1)

    def _follow_changed(self, following: bool) -> None:
        if self.follow_button.isChecked() != following:
            self.follow_button.blockSignals(True)
            self.follow_button.setChecked(following)
            self.follow_button.blockSignals(False)
