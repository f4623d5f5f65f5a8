"""``QtAskDialog``: what the dialogs that ask a run's agents something share (``QtStacksDialog``,
``QtRunSettingsDialog``, ``QtProfileDialog``).

The request in flight (``job``: started off the GUI thread, see ``qt_stacks.start_ask``), its outcome handed to
``show_result`` (the collector's result map) or ``show_error`` (why there is none: kept in ``error`` and said in
the status line, after ``NO_ANSWER``), the status line, and the layout: the widgets on top, a body that takes the
room left, and a row of buttons that ends with Close. The questions, the answers' views and the buttons' actions
are each dialog's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6 import QtGui, QtWidgets

from ringscope.gui.views import theme


class QtAskDialog(QtWidgets.QDialog):
    """A non-modal dialog with one request to the agents in flight at most (``job``). The subclass sets
    ``status_line`` (the label that says what the dialog does) and ``_idle`` (what a finished request enables)."""

    NO_ANSWER = ""
    """What the status line says before the reason there is no answer, e.g. "No stacks: "."""
    status_line: QtWidgets.QLabel

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.job: object | None = None
        self.error: str | None = None

    def show_result(self, result: dict[str, Any]) -> None:
        """Show the collector's answer (the dialog's own)."""
        raise NotImplementedError

    def show_error(self, text: str) -> None:
        """Say why there is no answer (no collector, unknown run, a value out of range...); what was shown before
        stays."""
        self._idle()
        self.error = text
        self._set_status(f"{self.NO_ANSWER}{text}", alert=True)

    def _idle(self) -> None:
        """The request is over (answered or not): the subclass enables what it disabled."""
        self.job = None

    def _set_status(self, text: str, alert: bool = False) -> None:
        self.status_line.setText(text)
        self.status_line.setStyleSheet(f"color: {theme.ALERT_COLOR};" if alert else "")

    def _answered(self, outcome: dict[str, Any] | str) -> None:
        """The receiver of a request: the answer, or a string saying why there is none."""
        if isinstance(outcome, str):
            self.show_error(outcome)
        else:
            self.show_result(outcome)

    def _lay_out(self, top: Sequence[QtWidgets.QWidget | QtWidgets.QLayout], body: QtWidgets.QWidget,
                 left: Sequence[QtWidgets.QPushButton], right: Sequence[QtWidgets.QPushButton]) -> None:
        """``top`` one under the other, ``body`` taking the room left, then the buttons: ``left``, a stretch,
        ``right`` and Close."""
        close = QtWidgets.QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QtWidgets.QHBoxLayout()
        for button in left:
            buttons.addWidget(button)
        buttons.addStretch(1)
        for button in (*right, close):
            buttons.addWidget(button)
        layout = QtWidgets.QVBoxLayout(self)
        for part in top:
            if isinstance(part, QtWidgets.QLayout):
                layout.addLayout(part)
            else:
                layout.addWidget(part)
        layout.addWidget(body, 1)
        layout.addLayout(buttons)


def fixed_pitch_view() -> QtWidgets.QPlainTextEdit:
    """A read-only text area in the fixed-pitch font, lines not wrapped (frames, profiler tables)."""
    view = QtWidgets.QPlainTextEdit()
    view.setReadOnly(True)
    view.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
    view.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
    return view
