"""Small helpers every chart uses: a themed plot with labelled axes, exact-value hover, fast percentiles.

Owns no telemetry state: a view passes a function that turns a data-space point into text, and the readout shows
it as a tooltip at the cursor (exact values, never a guess from pixels).
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.views import theme

Describe = Callable[[float, float], str | None]
PIXMAP_CACHE_KIB = 96 * 1024  # room for every plot's cached axes on a 4K screen


def make_plot(left: str, left_units: str | None, bottom: str, bottom_units: str | None,
              tooltip: str = "", axis_items: dict[str, pg.AxisItem] | None = None) -> pg.PlotWidget:
    """A plot with units on both axes (pyqtgraph prints them as 'label (units)'), menus off, mouse kept simple."""
    widget = pg.PlotWidget(axisItems=axis_items)
    theme.style_plot(widget)
    item = widget.getPlotItem()
    item.setLabel("left", left, units=left_units)
    item.setLabel("bottom", bottom, units=bottom_units)
    item.showGrid(x=True, y=True, alpha=0.15)
    item.setMenuEnabled(False)
    item.hideButtons()
    widget.setMouseEnabled(x=False, y=False)
    # The axis caches below live in QPixmapCache, one plot-sized pixmap per axis (the grid is drawn by the axes).
    # Qt's default 10 MiB holds ~12 of them: with 8 plots in a 1600 x 1000 window they evict each other and
    # every repaint re-renders every axis (measured: +15 ms a frame, the window fell from ~17 to ~4 FPS).
    QtGui.QPixmapCache.setCacheLimit(max(QtGui.QPixmapCache.cacheLimit(), PIXMAP_CACHE_KIB))
    for name in ("left", "bottom"):
        # Axes change rarely (ranges are fixed or rounded) but every data update repaints the view; without a
        # cache each repaint re-plays the axis' text (measured: ~half the frame time with 8 plots).
        item.getAxis(name).setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)
    for name, units in (("left", left_units), ("bottom", bottom_units)):
        if units is None:  # a count or an index (rank, GPU): "(x0.001)" SI prefixes there only confuse
            item.getAxis(name).enableAutoSIPrefix(False)
    widget.setMinimumHeight(140)
    if tooltip:
        widget.setToolTip(tooltip)
    return widget


def same_values(held: np.ndarray | None, values: np.ndarray) -> bool:
    """True when a curve already shows ``values`` (NaN where they have NaN): its redraw can be skipped."""
    return held is not None and held.shape == values.shape and np.array_equal(held, values, equal_nan=True)


class Bars(pg.BarGraphItem):
    """A ``BarGraphItem`` that works out its bounding rectangle once per data or view change.

    pyqtgraph's works out the pixel size on every call, and the scene asks for it ~14 times a repaint: at 1 024
    ranks ~1 ms of each frame went there (GUI-thread profile). Like ``PlotCurveItem``'s, the rectangle is kept
    until the data (``setOpts``) or the view's transform (range, resize) changes.
    """

    _bounds: QtCore.QRectF | None = None

    def setOpts(self, **opts: object) -> None:
        self._bounds = None
        super().setOpts(**opts)
        self._bounds = None  # what was asked for during the change is from the half-set data

    def viewTransformChanged(self) -> None:
        self._bounds = None
        self.prepareGeometryChange()
        super().viewTransformChanged()

    def boundingRect(self) -> QtCore.QRectF:
        if self._bounds is None:
            self._bounds = super().boundingRect()
        return QtCore.QRectF(self._bounds)


class HoverReadout(QtCore.QObject):
    """Shows ``describe(x, y)`` as a tooltip where the mouse is over ``widget`` (data coordinates)."""

    def __init__(self, widget: pg.PlotWidget, describe: Describe) -> None:
        super().__init__(widget)
        # Neither the plot nor a view's bound method is held: this readout is the plot's Qt child, so a strong
        # reference back to the plot or to the view around it is a cycle through Qt's ownership, and Python's
        # collector tearing such a cycle apart segfaulted in ~QBoxLayout (a view dropped without close()).
        self._describe: Callable[[], Describe | None] = (
            weakref.WeakMethod(describe) if isinstance(describe, types.MethodType) else lambda: describe)
        self.last_text: str | None = None
        widget.scene().sigMouseMoved.connect(self._moved)

    def text_at(self, x: float, y: float) -> str | None:
        """The readout for a data-space point (what the tooltip would say)."""
        describe = self._describe()
        if describe is None:  # the view that described points is gone
            return None
        try:
            return describe(x, y)
        except (IndexError, ValueError):
            return None

    def _moved(self, scene_pos: QtCore.QPointF) -> None:
        widget = self.parent()
        if not isinstance(widget, pg.PlotWidget):
            return
        view = widget.getPlotItem().vb
        if not view.sceneBoundingRect().contains(scene_pos):
            return
        point = view.mapSceneToView(scene_pos)
        text = self.text_at(point.x(), point.y())
        self.last_text = text
        global_pos = widget.mapToGlobal(widget.mapFromScene(scene_pos))
        if text:
            QtWidgets.QToolTip.showText(global_pos, text, widget)
        else:
            QtWidgets.QToolTip.hideText()


def seconds_ago(bucket_start_s: np.ndarray, bucket_s: float, now_s: float) -> np.ndarray:
    """Bucket centres as seconds relative to now (negative = in the past), float64 for fast clipping.

    Before the first step the buckets have no time yet: they are laid out ending now, so axes stay sane.
    """
    x = (bucket_start_s + bucket_s / 2.0 - now_s).astype(np.float64)
    if x.size and not np.isfinite(x).all():
        x = (np.arange(x.size, dtype=np.float64) - x.size + 0.5) * bucket_s
    return x


def format_share(value: float) -> str:
    """A share (0..1) as a percentage, or 'no data'."""
    return "no data" if not np.isfinite(value) else f"{100.0 * value:.1f} %"


def format_seconds(value: float) -> str:
    """Seconds with a sensible unit, or 'no data'."""
    if not np.isfinite(value):
        return "no data"
    if abs(value) < 1.0:
        return f"{value * 1000.0:.1f} ms"
    return f"{value:.2f} s"


def label_rows(widget: pg.PlotWidget, axis: str, positions: Sequence[float], labels: Sequence[str],
               max_labels: int = 32) -> None:
    """Name each row/column of an index axis (rank or GPU) when there are few; automatic ticks when many.

    Only touches the axis when the labels changed (ticks are cached with the axis).
    """
    ticks = [list(zip(positions, labels, strict=True))] if 0 < len(labels) <= max_labels else None
    key = f"_ringscope_ticks_{axis}"
    if getattr(widget, key, "unset") == ticks:
        return
    setattr(widget, key, ticks)
    widget.getPlotItem().getAxis(axis).setTicks(ticks)


def set_range(widget: pg.PlotWidget, *, x: tuple[float, float] | None = None,
              y: tuple[float, float] | None = None) -> None:
    """Set axis ranges only when they changed (``setXRange`` every frame costs ~0.5 ms per plot)."""
    last = getattr(widget, "_ringscope_range", None)
    if last == (x, y):
        return
    widget._ringscope_range = (x, y)  # type: ignore[attr-defined]
    if x is not None:
        widget.setXRange(*x, padding=0)
    if y is not None:
        widget.setYRange(*y, padding=0)
