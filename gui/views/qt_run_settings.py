"""Run ▸ Telemetry settings…: change a running training's telemetry settings, and read what every rank did.

The settings are the ones an agent lets a collector change while it trains (``ringscope.agent.control.SETTINGS``):
DDP's communication timing, how long a rank sits in one phase before its heartbeat carries its stack, and the
device sampling period: what ``ringscope control`` sends. Only the settings the user ticks are sent. Every agent
answers with what it applied and what it refused (and why); ranks with the same outcome are folded into one line,
so 512 ranks read as one or two lines.

The dialog receives ``send(settings, receiver)``: a function that starts the request off the GUI thread
(``qt_stacks.start_ask``) and returns its job; it owns only its widgets and the request in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6 import QtCore, QtWidgets

from ringscope.agent.control import SETTINGS
from ringscope.agent.publisher import FLUSH_INTERVAL_S
from ringscope.gui.core.analysis.stacks import rank_ranges
from ringscope.gui.views.qt_ask_dialog import QtAskDialog

SETTING_WORDS = {"timing": "DDP timing", "stack_after_s": "stack after", "device_interval_s": "device interval",
                 "flush_interval_s": "flush interval"}
"""How the dialog names each setting in its outcome lines."""
TIMING_CHOICES = (("unchanged", None), ("light — no communication hook", "light"),
                  ("full — per-bucket communication hook", "full"))
STACK_AFTER_DEFAULT_S = 5.0  # the agent's default (ringscope.agent.heartbeat.STACK_AFTER_S)
DEVICE_INTERVAL_DEFAULT_S = 0.5  # the agent's default (RINGSCOPE_DEVICE_INTERVAL_S)


class QtRunSettingsDialog(QtAskDialog):
    """Non-modal. ``send(settings, receiver)`` starts the ``set`` request; ``receiver`` gets the collector's result
    map, or a string saying why there is none."""

    NO_ANSWER = "Nothing applied: "

    sig_applied = QtCore.Signal(object)
    """An answer arrived and is shown (argument: the collector's result map)."""

    def __init__(self, run_id: str, send: Callable[[dict[str, Any], Callable[[Any], object]], object], *,
                 agents_phrase: str | None = None, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.run_id, self.send = run_id, send
        self.agents_phrase = agents_phrase or f"the agents of run {run_id}"
        self.answer: dict[str, Any] | None = None
        self.setWindowTitle(f"Telemetry settings — run {run_id}")
        self.resize(620, 460)
        intro = QtWidgets.QLabel(f"Sent now to every live agent of run <b>{run_id}</b>; each one says what it "
                                 "applied and what it refused. A setting lasts as long as its process; a new launch "
                                 "starts with the defaults.")
        intro.setWordWrap(True)
        self.timing = QtWidgets.QComboBox()
        for label, value in TIMING_CHOICES:
            self.timing.addItem(label, value)
        self.timing.setToolTip("light: the step's communication time comes from the step marks only (cheapest); "
                               "full: a communication hook times every gradient bucket")
        self.stack_check, self.stack_after = _seconds_row(SETTINGS["stack_after_s"], STACK_AFTER_DEFAULT_S, 1)
        self.stack_check.setToolTip("How long a rank sits in one phase before its heartbeat carries its stack "
                                    "(what Run ▸ Hang details… shows)")
        self.device_check, self.device_interval = _seconds_row(SETTINGS["device_interval_s"],
                                                               DEVICE_INTERVAL_DEFAULT_S, 2)
        self.device_check.setToolTip("The GPU / host sampling period (NVML, psutil)")
        self.flush_check, self.flush_interval = _seconds_row(SETTINGS["flush_interval_s"], FLUSH_INTERVAL_S, 2)
        self.flush_check.setToolTip("How long records wait on the agent before they are sent: longer wakes the "
                                    "ranks' sender threads and the collector less often (a recorder on the training's "
                                    "cores: 0.25 s), shorter shows steps sooner")
        form = QtWidgets.QFormLayout()
        form.addRow("DDP communication timing:", self.timing)
        form.addRow("Send a rank's stack after:", _row(self.stack_check, self.stack_after))
        form.addRow("Device sampling interval:", _row(self.device_check, self.device_interval))
        form.addRow("Send telemetry every:", _row(self.flush_check, self.flush_interval))
        self.status = self.status_line = QtWidgets.QLabel("Tick a setting to change it.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.outcome = QtWidgets.QPlainTextEdit()
        self.outcome.setReadOnly(True)
        self.outcome.setPlaceholderText("What each rank applied or refused appears here.")
        self.apply_button = QtWidgets.QPushButton("Apply")
        self.apply_button.setDefault(True)
        self.apply_button.clicked.connect(self.apply)
        self._lay_out([intro, form, self.status], self.outcome, [], [self.apply_button])
        for signal in (self.timing.currentIndexChanged, self.stack_check.toggled, self.device_check.toggled,
                       self.flush_check.toggled):
            signal.connect(self._update_apply)
        self._update_apply()

    # ---- Public API ----------------------------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What Apply sends: the ticked settings only (``ringscope.agent.control.SETTINGS`` names)."""
        out: dict[str, Any] = {}
        if self.timing.currentData() is not None:
            out["timing"] = self.timing.currentData()
        if self.stack_check.isChecked():
            out["stack_after_s"] = round(self.stack_after.value(), 3)
        if self.device_check.isChecked():
            out["device_interval_s"] = round(self.device_interval.value(), 3)
        if self.flush_check.isChecked():
            out["flush_interval_s"] = round(self.flush_interval.value(), 3)
        return out

    def apply(self) -> None:
        """Send the ticked settings (off the GUI thread); the dialog says it is waiting meanwhile."""
        settings = self.settings()
        if not settings or self.job is not None:
            return
        self._set_status(f"Asking {self.agents_phrase} to apply {_words(settings)}…")
        self.apply_button.setEnabled(False)
        self.job = self.send(settings, self._answered)

    def show_result(self, result: dict[str, Any]) -> None:
        """Show a collector's ``set`` result: a summary, then one line per group of ranks with the same outcome."""
        self._idle()
        self.answer, self.error = result, None
        entries = [e for e in result.get("ranks", []) if isinstance(e, dict)]
        groups: dict[str, list[int]] = {}
        for entry in entries:
            rank = entry.get("rank")
            groups.setdefault(_outcome(entry), []).append(int(rank) if isinstance(rank, int) else -1)
        complete = sum(1 for e in entries if e.get("answered") and not e.get("refused"))
        took = result.get("elapsed_s")
        took_text = f" in {took:.2f} s" if isinstance(took, int | float) else ""
        answered = sum(1 for e in entries if e.get("answered"))
        summary = (f"{answered} of {len(entries)} rank{'s' if len(entries) != 1 else ''} answered{took_text}: "
                   f"{complete} applied everything asked")
        self._set_status(summary, alert=complete != len(entries))
        lines = [f"{_rank_words(ranks)}: {outcome}" for outcome, ranks in
                 sorted(groups.items(), key=lambda item: (-len(item[1]), min(item[1])))]
        self.outcome.setPlainText("\n".join(lines))
        self.sig_applied.emit(result)

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _idle(self) -> None:
        self.job = None
        self._update_apply()

    def _update_apply(self, *_args: object) -> None:
        self.stack_after.setEnabled(self.stack_check.isChecked())
        self.device_interval.setEnabled(self.device_check.isChecked())
        self.flush_interval.setEnabled(self.flush_check.isChecked())
        chosen = bool(self.settings())
        self.apply_button.setEnabled(chosen and self.job is None)
        self.apply_button.setToolTip("" if chosen else "Choose a timing or tick a setting to change first")



def _seconds_row(spec: Any, default: float, decimals: int) -> tuple[QtWidgets.QCheckBox, QtWidgets.QDoubleSpinBox]:
    check = QtWidgets.QCheckBox("change to")
    spin = QtWidgets.QDoubleSpinBox()
    spin.setRange(float(spec[1]), float(spec[2]))
    spin.setDecimals(decimals)
    spin.setSingleStep(0.5 if decimals == 1 else 0.05)
    spin.setSuffix(" s")
    spin.setValue(default)
    spin.setMinimumWidth(110)
    spin.setToolTip(f"{spec[1]:g} to {spec[2]:g} seconds")
    return check, spin


def _row(check: QtWidgets.QCheckBox, spin: QtWidgets.QDoubleSpinBox) -> QtWidgets.QWidget:
    row = QtWidgets.QWidget()
    layout = QtWidgets.QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(check)
    layout.addWidget(spin)
    layout.addStretch(1)
    return row


def _words(settings: dict[str, Any]) -> str:
    """``{"stack_after_s": 2.0}`` -> ``"stack after 2 s"``."""
    parts = []
    for name, value in settings.items():
        unit = " s" if name.endswith("_s") and isinstance(value, int | float) else ""
        shown = f"{value:g}" if isinstance(value, int | float) else str(value)
        parts.append(f"{SETTING_WORDS.get(name, name)} {shown}{unit}")
    return ", ".join(parts)


def _outcome(entry: dict[str, Any]) -> str:
    if not entry.get("answered"):
        return "no answer" + (f" ({entry['note']})" if entry.get("note") else "")
    applied = entry.get("applied") or {}
    refused = entry.get("refused") or {}
    parts = [f"applied {_words(applied)}"] if applied else ["applied nothing"]
    parts.extend(f"refused {SETTING_WORDS.get(name, name)}: {why}" for name, why in refused.items())
    return "; ".join(parts)


def _rank_words(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {rank_ranges(ranks)}"
