"""``QtSweepProgress``: what the sweep dialog shows of a running sweep: a status line, a bar of configurations and
the sweep's output.

Shows what it is given (``ringscope.gui.core.sweep.progress_lines.SweepProgress`` read from the output, and the
output's lines); it never reads a process: ``QtSweepDialog`` does.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6 import QtWidgets

from ringscope.gui.core.sweep.progress_lines import SweepProgress
from ringscope.gui.views import theme
from ringscope.gui.views.qt_sweep_form import wrapped_label

LOG_LINES = 500


class QtSweepProgress(QtWidgets.QWidget):
    """The status line, the configurations' progress bar (hidden until a sweep starts) and the output."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.status_label = wrapped_label()
        layout.addWidget(self.status_label)
        self.progress_bar = QtWidgets.QProgressBar()
        self.progress_bar.setFormat("%v of %m configurations")
        self.progress_bar.setVisible(False)
        layout.addWidget(self.progress_bar)
        self.log_view = QtWidgets.QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_LINES)
        self.log_view.setPlaceholderText("The sweep's output appears here.")
        self.log_view.setMinimumHeight(120)
        layout.addWidget(self.log_view, 1)

    def begin(self, configurations: int) -> None:
        """A sweep of ``configurations`` starts: the output is cleared and the bar starts at 0."""
        self.log_view.clear()
        self.progress_bar.setRange(0, max(configurations, 1))
        self.progress_bar.setValue(0)
        self.show_status(f"Starting {configurations} configuration(s)…")

    def add_output(self, lines: Iterable[str], missed: int = 0) -> None:
        """The sweep's new output lines (``missed``: how many were dropped before them)."""
        if missed:
            self.log_view.appendPlainText(f"… {missed} line(s) not shown")
        for line in lines:
            self.log_view.appendPlainText(line)

    def show_progress(self, progress: SweepProgress) -> None:
        """A progress line: the bar counts the configurations run to their end; the status says which runs now."""
        self.progress_bar.setRange(0, max(progress.total, 1))
        ran = progress.event in ("done", "failed")  # a stopped configuration did not run to its end
        self.progress_bar.setValue(progress.number if ran else progress.number - 1)
        text = progress.text()
        if progress.event == "failed" and progress.detail:
            text += f": {progress.detail}"
        self.show_status(text)

    def show_status(self, text: str, alert: bool = False) -> None:
        """``text`` in the status line (in the alert colour when ``alert``)."""
        self.status_label.setText(text)
        self.status_label.setStyleSheet(f"color: {theme.ALERT_COLOR};" if alert else "")
