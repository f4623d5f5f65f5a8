"""The hang details dialog: the verdict on a hung run and the Python stacks of the ranks that did not arrive.

Receives a ``HangVerdict`` (``ringscope.gui.core.analysis.hang``) and shows it as
``ringscope.gui.core.live.watch.hang_text`` words it —
the same text the recording, ``ringscope info`` and the reports keep — in a read-only monospace view with a Copy
button, so a stack can go straight into a ticket. "Dump stacks now" asks the run's agents for their stacks as they
are now (``stacks``: the window's ``RunAgentActions``, ``ringscope.gui.views.qt_stacks``). Owns no state.
"""

from __future__ import annotations

import time
from typing import Protocol

from PySide6 import QtGui, QtWidgets

from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.live.watch import hang_text


class StackDumper(Protocol):
    """What the dialog needs to dump a run's stacks now (``qt_stacks.RunAgentActions``)."""

    def unavailable(self, run_id: str | None) -> str:
        """Why the run's agents cannot be asked now ('' when they can)."""
        ...

    def dump_stacks(self, run_id: str | None = None) -> object:
        """Open the stacks dialog of ``run_id`` and ask its agents."""
        ...


class QtHangDialog(QtWidgets.QDialog):
    """Non-modal: the window keeps drawing while the user reads the stacks."""

    def __init__(self, run_id: str, verdict: HangVerdict | None, parent: QtWidgets.QWidget | None = None,
                 *, still_hung: bool = True, stacks: StackDumper | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Hang details — run {run_id}")
        self.resize(900, 560)
        layout = QtWidgets.QVBoxLayout(self)
        if verdict is None:
            text = f"No hang detected in run {run_id}: its ranks complete steps (or it ended)."
        else:
            now = time.time()
            text = hang_text(verdict, now)
            if not still_hung:
                text = "This run is no longer hung; the verdict when it was:\n\n" + text
        self.text = QtWidgets.QPlainTextEdit(text)
        self.text.setReadOnly(True)
        self.text.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        self.text.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        copy = QtWidgets.QPushButton("Copy")
        copy.clicked.connect(lambda: QtWidgets.QApplication.clipboard().setText(self.text.toPlainText()))
        close = QtWidgets.QPushButton("Close")
        close.clicked.connect(self.close)
        self.dump_button = QtWidgets.QPushButton("Dump stacks now")
        reason = "this window cannot ask agents" if stacks is None else stacks.unavailable(run_id)
        self.dump_button.setEnabled(not reason)
        self.dump_button.setToolTip(reason or "Ask every agent of the run for its stacks as they are now")
        if stacks is not None:
            self.dump_button.clicked.connect(lambda: stacks.dump_stacks(run_id))
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.dump_button)
        row.addStretch(1)
        row.addWidget(copy)
        row.addWidget(close)
        layout.addWidget(self.text, 1)
        layout.addLayout(row)
