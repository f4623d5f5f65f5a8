"""Run ▸ Capture profile…: the framework's profiler on the next N steps of chosen ranks, and a one-screen summary.

The request goes through the window's collector (``ringscope.gui.core.ingest.ask``, the same as ``ringscope
profile``) on a thread of its own, which also merges the ranks' traces (``ringscope.gui.core.report.profiles``) into
the chosen folder; the dialog then shows where the trace is and each rank's top operators by self time. Nothing
here blocks the GUI thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.agent.control import MAX_PROFILE_STEPS
from ringscope.gui.core.analysis.stacks import parse_rank_list
from ringscope.gui.views import theme

PROFILE_TIP = "Run the framework's profiler on the next N steps of chosen ranks; one merged trace and the top ops"

Send = Callable[[int, list[int] | None, Path, Callable[[Any], object]], object]
"""``send(steps, ranks, folder, receiver)``: start the request; ``receiver`` gets the summary map or an error text."""


class QtProfileDialog(QtWidgets.QDialog):
    """Capture a profile of ``run_id`` (see the module docstring); ``send`` starts the request off the GUI thread."""

    def __init__(self, run_id: str, send: Send, default_folder: Path,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.run_id = run_id
        self._send = send
        self.job: object | None = None
        self.setWindowTitle(f"Capture profile — {run_id}")
        self.resize(860, 560)
        intro = QtWidgets.QLabel(
            f"The chosen ranks of run <b>{run_id}</b> run their framework's profiler (torch.profiler / TensorFlow's) "
            "around their next steps; the training pays for it during those steps only.")
        intro.setWordWrap(True)
        self.steps = QtWidgets.QSpinBox()
        self.steps.setRange(1, MAX_PROFILE_STEPS)
        self.steps.setValue(5)
        self.ranks = QtWidgets.QLineEdit()
        self.ranks.setPlaceholderText("all ranks (or e.g. 0,3,5-7)")
        self.folder = QtWidgets.QLineEdit(str(default_folder))
        browse = QtWidgets.QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder_row = QtWidgets.QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        form = QtWidgets.QFormLayout()
        form.addRow("Steps to profile:", self.steps)
        form.addRow("Ranks:", self.ranks)
        form.addRow("Save the trace in:", folder_row)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        self.summary = QtWidgets.QPlainTextEdit()
        self.summary.setReadOnly(True)
        self.summary.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        self.summary.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.capture_button = QtWidgets.QPushButton("Capture")
        self.capture_button.setDefault(True)
        self.capture_button.clicked.connect(self.capture)
        self.open_button = QtWidgets.QPushButton("Open folder")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self._open_folder)
        close = QtWidgets.QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.capture_button)
        buttons.addStretch(1)
        buttons.addWidget(self.open_button)
        buttons.addWidget(close)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.summary, 1)
        layout.addLayout(buttons)

    def capture(self) -> None:
        """Ask for the profile (the answer arrives in ``show_outcome``)."""
        ranks = parse_ranks(self.ranks.text())
        if isinstance(ranks, str):
            self._set_status(ranks, theme.ALERT_COLOR)
            return
        folder = Path(self.folder.text().strip() or ".").expanduser()
        self.capture_button.setEnabled(False)
        self._set_status(f"Profiling the next {self.steps.value()} step(s) of "
                         f"{'ranks ' + self.ranks.text().strip() if ranks else 'every rank'}… (waits for the steps "
                         "to run and the traces to be written)", "")
        self.job = self._send(self.steps.value(), ranks, folder, self.show_outcome)

    @QtCore.Slot(object)
    def show_outcome(self, outcome: dict[str, Any] | str) -> None:
        """The summary map (``text``, ``trace``, ``folder``) or why there is none."""
        self.job = None
        self.capture_button.setEnabled(True)
        if isinstance(outcome, str):
            self._set_status(outcome, theme.ALERT_COLOR)
            return
        self.summary.setPlainText(outcome["text"])
        self.open_button.setEnabled(True)
        self._folder = Path(outcome["folder"])
        if outcome.get("trace"):
            self._set_status(f"Trace written: {outcome['trace']} — open it in ui.perfetto.dev", "")
        else:
            self._set_status("No trace could be merged here; see below why", theme.ALERT_COLOR)

    def _set_status(self, text: str, color: str) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {color}" if color else "")

    def _browse(self) -> None:
        chosen = QtWidgets.QFileDialog.getExistingDirectory(self, "Save the trace in", self.folder.text())
        if chosen:
            self.folder.setText(chosen)

    def _open_folder(self) -> None:
        QtGui.QDesktopServices.openUrl(QtCore.QUrl.fromLocalFile(os.fspath(self._folder)))


def parse_ranks(text: str) -> list[int] | str | None:
    """``""`` -> None (all ranks), ``"0,3,5-7"`` -> the ranks, anything else -> the sentence saying what is wrong."""
    if not text.strip():
        return None
    try:
        return parse_rank_list(text)
    except ValueError as exc:
        return f"Ranks: {exc}"
