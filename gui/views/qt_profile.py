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
from ringscope.gui.views.qt_ask_dialog import QtAskDialog, fixed_pitch_view

PROFILE_TIP = "Run the framework's profiler on the next N steps of chosen ranks; one merged trace and the top ops"

Send = Callable[[int, list[int] | None, Path, Callable[[Any], object]], object]
"""``send(steps, ranks, folder, receiver)``: start the request; ``receiver`` gets the summary map or an error text."""


class QtProfileDialog(QtAskDialog):
    """Capture a profile of ``run_id`` (see the module docstring); ``send`` starts the request off the GUI thread."""

    def __init__(self, run_id: str, send: Send, default_folder: Path,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.run_id = run_id
        self._send = send
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
        self.status = self.status_line = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        self.summary = fixed_pitch_view()
        self.capture_button = QtWidgets.QPushButton("Capture")
        self.capture_button.setDefault(True)
        self.capture_button.clicked.connect(self.capture)
        self.open_button = QtWidgets.QPushButton("Open folder")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self._open_folder)
        self._lay_out([intro, form, self.status], self.summary, [self.capture_button], [self.open_button])

    def capture(self) -> None:
        """Ask for the profile (the answer arrives in ``show_result``, or ``show_error``)."""
        ranks = parse_ranks(self.ranks.text())
        if isinstance(ranks, str):
            self._set_status(ranks, alert=True)
            return
        folder = Path(self.folder.text().strip() or ".").expanduser()
        self.capture_button.setEnabled(False)
        self._set_status(f"Profiling the next {self.steps.value()} step(s) of "
                         f"{'ranks ' + self.ranks.text().strip() if ranks else 'every rank'}… (waits for the steps "
                         "to run and the traces to be written)")
        self.job = self._send(self.steps.value(), ranks, folder, self._answered)

    def show_result(self, result: dict[str, Any]) -> None:
        """Show the summary map (``text``, ``trace``, ``folder``)."""
        self._idle()
        self.summary.setPlainText(result["text"])
        self.open_button.setEnabled(True)
        self._folder = Path(result["folder"])
        if result.get("trace"):
            self._set_status(f"Trace written: {result['trace']} — open it in ui.perfetto.dev")
        else:
            self._set_status("No trace could be merged here; see below why", alert=True)

    def _idle(self) -> None:
        self.job = None
        self.capture_button.setEnabled(True)

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
