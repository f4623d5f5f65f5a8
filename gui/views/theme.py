"""Colors, fonts and the dark / light appearance of the window — defined once, used by every view.

Phase colors come from ``ringscope.gui.core.phases`` (shared with the reports), so a phase looks the same in every
chart, table, tooltip and export. This module owns the Qt palette, the style sheet and pyqtgraph's defaults; it must not
hold any telemetry state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

from ringscope import resources
from ringscope.gui.core import phases

PHASE_COLORS: dict[str, str] = {p.name: p.color for p in phases.PHASES}
PHASE_LABELS: dict[str, str] = {p.name: p.label for p in phases.PHASES}
PHASE_DESCRIPTIONS: dict[str, str] = {p.name: p.description for p in phases.PHASES}
NO_DATA_COLOR = phases.NO_DATA_COLOR
ALERT_COLOR = phases.ALERT_COLOR
OK_COLOR = "#59a14f"
LOST_COLOR = "#8c8c8c"
STRAGGLER_COLOR = ALERT_COLOR
RUN_COLORS: tuple[str, str] = ("#4dd0e1", "#e377c2")
"""Run A and run B where two runs share a chart (compare): unlike every phase colour, and unlike each other."""
HEAT_COLORMAP = "inferno"
"""Perceptually uniform and readable on dark and light backgrounds; 0 dark, 1 bright."""
IDLE_UTIL_PCT = 30.0
"""Below this NVML utilization a GPU bar is drawn red (nvtop habit)."""


@dataclass(frozen=True, slots=True)
class Appearance:
    """One theme: window colors and the matching pyqtgraph background / foreground."""

    name: str
    window: str
    base: str
    alt_base: str
    text: str
    muted: str
    highlight: str
    plot_background: str
    plot_foreground: str
    no_data: str
    """Cells without data: distinct from the colormap's dark 0, quiet enough not to outshine the data."""


DARK = Appearance("dark", "#1e1f22", "#26282c", "#2d3035", "#e6e6e6", "#9aa0a6", "#3d7bd9", "#17181b", "#c8c8c8",
                  "#4a4d52")
LIGHT = Appearance("light", "#f3f3f3", "#ffffff", "#f5f7fa", "#1d1d1f", "#5f6368", "#2f6fcf", "#ffffff", "#303030",
                   NO_DATA_COLOR)
THEMES: dict[str, Appearance] = {"dark": DARK, "light": LIGHT}

_current: Appearance = DARK


def current() -> Appearance:
    """The appearance in use (dark until ``apply_theme`` says otherwise)."""
    return _current


def apply_theme(app: QtWidgets.QApplication, name: str) -> Appearance:
    """Apply the dark or light appearance to the application and to pyqtgraph plots created afterwards."""
    global _current
    look = THEMES.get(name, DARK)
    _current = look
    app.setStyle("Fusion")
    palette = QtGui.QPalette()
    role = QtGui.QPalette.ColorRole
    palette.setColor(role.Window, QtGui.QColor(look.window))
    palette.setColor(role.WindowText, QtGui.QColor(look.text))
    palette.setColor(role.Base, QtGui.QColor(look.base))
    palette.setColor(role.AlternateBase, QtGui.QColor(look.alt_base))
    palette.setColor(role.Text, QtGui.QColor(look.text))
    palette.setColor(role.Button, QtGui.QColor(look.alt_base))
    palette.setColor(role.ButtonText, QtGui.QColor(look.text))
    palette.setColor(role.ToolTipBase, QtGui.QColor(look.base))
    palette.setColor(role.ToolTipText, QtGui.QColor(look.text))
    palette.setColor(role.Highlight, QtGui.QColor(look.highlight))
    palette.setColor(role.HighlightedText, QtGui.QColor("#ffffff"))
    palette.setColor(role.PlaceholderText, QtGui.QColor(look.muted))
    palette.setColor(QtGui.QPalette.ColorGroup.Disabled, role.Text, QtGui.QColor(look.muted))
    palette.setColor(QtGui.QPalette.ColorGroup.Disabled, role.ButtonText, QtGui.QColor(look.muted))
    app.setPalette(palette)
    # resources.__path__ rather than resources.path(): a stale editable install can expose it as a namespace package
    sheet = Path(next(iter(resources.__path__))) / "styles" / f"{look.name}.qss"
    app.setStyleSheet(sheet.read_text(encoding="utf-8") if sheet.exists() else "")
    pg.setConfigOptions(background=look.plot_background, foreground=look.plot_foreground, antialias=False)
    return look


def style_plot(widget: pg.PlotWidget) -> None:
    """Give an existing plot the current theme's colors (plots made before ``apply_theme`` keep the old ones)."""
    widget.setBackground(_current.plot_background)
    for name in ("left", "bottom", "right", "top"):
        axis = widget.getPlotItem().getAxis(name)
        axis.setPen(_current.plot_foreground)
        axis.setTextPen(_current.plot_foreground)


def rank_color(index: int, count: int) -> QtGui.QColor:
    """A distinct line color per rank, dark enough to read on the light background too."""
    return pg.intColor(index, hues=max(count, 8), maxValue=255 if _current.name == "dark" else 170)


def legend_html() -> str:
    """The phase legend as rich text (one colored square per phase), for labels and tooltips."""
    parts = [f'<span style="color:{PHASE_COLORS[p.name]}">&#9632;</span>&nbsp;{p.label}' for p in phases.PHASES]
    return "&nbsp;&nbsp;&nbsp;".join(parts)


def color(name: str, alpha: int = 255) -> QtGui.QColor:
    """A QColor from a hex string, with alpha."""
    out = QtGui.QColor(name)
    out.setAlpha(alpha)
    return out
