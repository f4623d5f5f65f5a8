"""Preferences (endpoint, theme, price per GPU-hour, lost-rank timeout, metrics port), persisted with QSettings.

``Preferences`` is a plain value; ``load_preferences`` / ``save_preferences`` read and write QSettings
(organization "Ringscope"); ``QtPreferencesDialog`` edits a copy and returns it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.analysis.runs import LOST_TIMEOUT_S
from ringscope.gui.core.ingest.collector import DEFAULT_BIND

ORGANIZATION = "Ringscope"
APPLICATION = "Ringscope"


@dataclass(frozen=True, slots=True)
class Preferences:
    """What the user can set. ``price_per_gpu_hour`` 0 means "not set"."""

    endpoint: str = DEFAULT_BIND
    theme: str = "dark"
    price_per_gpu_hour: float = 0.0
    lost_timeout_s: float = LOST_TIMEOUT_S  # agents beat every second: 2 s of silence is a dead rank
    metrics_port: int = 0  # serve Prometheus / OpenMetrics on 127.0.0.1:this port; 0 = off


def _settings() -> QtCore.QSettings:
    return QtCore.QSettings(ORGANIZATION, APPLICATION)


def load_preferences() -> Preferences:
    """Read the saved preferences (defaults for anything missing or unreadable)."""
    settings = _settings()
    default = Preferences()

    def number(key: str, fallback: float) -> float:
        try:
            return float(settings.value(key, fallback))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return fallback

    theme = str(settings.value("theme", default.theme))
    return Preferences(
        endpoint=str(settings.value("endpoint", default.endpoint)),
        theme=theme if theme in ("dark", "light") else default.theme,
        price_per_gpu_hour=max(0.0, number("price_per_gpu_hour", default.price_per_gpu_hour)),
        lost_timeout_s=max(0.5, number("lost_timeout_s", default.lost_timeout_s)),
        metrics_port=int(min(65535, max(0, number("metrics_port", default.metrics_port)))),
    )


def save_preferences(prefs: Preferences) -> None:
    """Write the preferences (QSettings, organization "Ringscope")."""
    settings = _settings()
    settings.setValue("endpoint", prefs.endpoint)
    settings.setValue("theme", prefs.theme)
    settings.setValue("price_per_gpu_hour", prefs.price_per_gpu_hour)
    settings.setValue("lost_timeout_s", prefs.lost_timeout_s)
    settings.setValue("metrics_port", prefs.metrics_port)
    settings.sync()


class QtPreferencesDialog(QtWidgets.QDialog):
    """Edits a copy of ``prefs``; ``result_preferences()`` gives the edited value."""

    def __init__(self, prefs: Preferences, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Ringscope preferences")
        self._prefs = prefs
        form = QtWidgets.QFormLayout(self)
        self.endpoint = QtWidgets.QLineEdit(prefs.endpoint)
        self.endpoint.setToolTip("ZeroMQ endpoint the collector binds, e.g. tcp://0.0.0.0:5757 to accept agents "
                                 "from other hosts. Takes effect at the next start.")
        self.theme = QtWidgets.QComboBox()
        self.theme.addItems(["dark", "light"])
        self.theme.setCurrentText(prefs.theme)
        self.theme.setToolTip("Takes effect at the next start.")
        self.price = QtWidgets.QDoubleSpinBox()
        self.price.setRange(0.0, 1000.0)
        self.price.setDecimals(2)
        self.price.setSuffix(" per GPU-hour")
        self.price.setValue(prefs.price_per_gpu_hour)
        self.price.setToolTip("Used for the cost of waiting; 0 = not set.")
        self.timeout = QtWidgets.QDoubleSpinBox()
        self.timeout.setRange(0.5, 3600.0)
        self.timeout.setSuffix(" s")
        self.timeout.setValue(prefs.lost_timeout_s)
        self.timeout.setToolTip("A rank with no message for longer than this is shown as lost.")
        form.addRow("Collector endpoint", self.endpoint)
        form.addRow("Theme", self.theme)
        form.addRow("Price", self.price)
        self.metrics_port = QtWidgets.QSpinBox()
        self.metrics_port.setRange(0, 65535)
        self.metrics_port.setSpecialValueText("off")
        self.metrics_port.setValue(prefs.metrics_port)
        self.metrics_port.setToolTip("Serve the live runs' metrics for Prometheus / Grafana on "
                                     "http://127.0.0.1:PORT/metrics (e.g. 9464); off = 0. Applies at once.")
        form.addRow("Lost-rank timeout", self.timeout)
        form.addRow("Metrics endpoint port", self.metrics_port)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def result_preferences(self) -> Preferences:
        """The preferences as edited in the dialog."""
        return replace(self._prefs, endpoint=self.endpoint.text().strip() or DEFAULT_BIND,
                       theme=self.theme.currentText(), price_per_gpu_hour=self.price.value(),
                       lost_timeout_s=self.timeout.value(), metrics_port=self.metrics_port.value())
