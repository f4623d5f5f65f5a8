"""The hang details dialog: the verdict on a hung run and the Python stacks of the ranks that did not arrive.

Receives a ``HangVerdict`` (``ringscope.gui.core.analysis.hang``) and shows it as
``ringscope.gui.core.live.watch.hang_text`` words it —
the same text the recording, ``ringscope info`` and the reports keep — in a read-only monospace view with a Copy
button, so a stack can go straight into a ticket. Owns no state.
"""

from __future__ import annotations

import time

from PySide6 import QtGui, QtWidgets

from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.live.watch import hang_text


class QtHangDialog(QtWidgets.QDialog):
    """Non-modal: the window keeps drawing while the user reads the stacks."""

    def __init__(self, run_id: str, verdict: HangVerdict | None, parent: QtWidgets.QWidget | None = None,
                 *, still_hung: bool = True) -> None:
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
        row = QtWidgets.QHBoxLayout()
        row.addStretch(1)
        row.addWidget(copy)
        row.addWidget(close)
        layout.addWidget(self.text, 1)
        layout.addLayout(row)
