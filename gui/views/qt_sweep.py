"""``QtSweepDialog``: run a scaling sweep / framework bake-off (``ringscope sweep``) from the window.

The dialog holds the form (``QtSweepForm``: every option of ``ringscope sweep``, checked on every change by the
CLI's own checks; Run stays disabled while there are errors), what it shows of a running sweep (``QtSweepProgress``)
and the sweep's child process. Its command line is ``ringscope.gui.core.sweep.request.sweep_argv``'s, so the dialog
runs exactly what the CLI would. ``prefill`` takes the values a launch shares with a sweep (the launch dialog's
Sweep… button).

Run starts ``python -m ringscope.gui.cli sweep ...`` as a child process (``ManagedProcess``: own process group, output
read by a thread); a timer on the GUI thread advances it and reads its progress lines ("config 3 of 6: ddp, 2
ranks"). Cancel sends SIGINT (the sweep stops its trainers and writes what it measured), then SIGKILL to everything
left after a grace period. At the end the report (DIR/sweep.html) is opened and the session (DIR/sweep.db) is offered
for opening in a window. The dialog does not close while its sweep runs: closing it cancels the sweep first.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.launch.demo import gpu_count as detect_gpus
from ringscope.gui.core.launch.plan import ProcessPlan
from ringscope.gui.core.launch.process import ManagedProcess
from ringscope.gui.core.sweep.progress_lines import SweepProgress, parse_progress
from ringscope.gui.core.sweep.request import (
    SweepRequest,
    default_out_folder,
    is_default_out_folder,
    sweep_argv,
    sweep_env,
)
from ringscope.gui.views.qt_sweep_form import QtSweepForm, row
from ringscope.gui.views.qt_sweep_progress import QtSweepProgress

POLL_MS = 100
STOP_GRACE_S = 30.0  # after Cancel the sweep still writes its reports (PDF included) before it exits
OUTPUT_LINES = 2000
QUIT_WAIT_S = 10.0


class QtSweepDialog(QtWidgets.QDialog):
    """The sweep form, and the sweep it starts.

    Args:
        initial: the form's first values (default: DDP on 1 and 2 ranks into a new folder).
        cpu_count / gpu_count: what the checks compare the rank counts with (default: this machine's).
        open_url: opens the report at the end (default ``QDesktopServices.openUrl``).
    """

    sig_progressed = QtCore.Signal(str)
    """The sweep moved on (argument: what it does now, e.g. "config 3 of 6: ddp, 2 ranks")."""

    sig_finished = QtCore.Signal(int)
    """The sweep's process ended (argument: its exit code; -1 when it was killed or never started)."""

    sig_open_session_requested = QtCore.Signal(str)
    """The user asked to open the sweep's session file in a window (argument: its path)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None, *, initial: SweepRequest | None = None,
                 cpu_count: int | None = None, gpu_count: int | None = None,
                 open_url: Callable[[QtCore.QUrl], object] = QtGui.QDesktopServices.openUrl) -> None:
        super().__init__(parent)
        self.setWindowTitle("Scaling sweep")
        self._open_url = open_url
        self.process: ManagedProcess | None = None
        self.running_request: SweepRequest | None = None
        self.progress: list[SweepProgress] = []  # every progress line of the sweep running (or last run)
        self.cancelled = False
        self._seen_lines = 0
        self._close_when_done = False
        self._build(cpu_count if cpu_count is not None else os.cpu_count(),
                    gpu_count if gpu_count is not None else detect_gpus())
        self.form.load(initial or SweepRequest(frameworks=("ddp",), ranks="1,2", out=default_out_folder()))
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        app = QtWidgets.QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop_now)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The command line the form's sweep runs (``sweep_argv``: the one the CLI would be typed with)."""
        return sweep_argv(self.form.request())

    def prefill(self, values: Mapping[str, object]) -> None:
        """Fill the form from what a launch shares with a sweep (``QtSweepForm.prefill``); nothing changes while a
        sweep runs: the form shows that sweep."""
        if not self.running:
            self.form.prefill(values)

    @property
    def running(self) -> bool:
        """True while the sweep's process is alive (also while it is stopping)."""
        return self.process is not None and self.process.alive

    def start(self) -> bool:
        """Start the form's sweep; False (and nothing started) when the form has errors or one already runs."""
        if self.running or self.form.revalidate():
            return False
        request = self.form.request()
        self.running_request, self.progress, self.cancelled, self._seen_lines = request, [], False, 0
        self.process = ManagedProcess(ProcessPlan("sweep", sweep_argv(request), sweep_env()), "sweep", OUTPUT_LINES)
        self.progress_view.begin(request.configuration_count())
        self._set_running(True)
        self.timer.start()
        self.poll()
        return True

    def cancel(self) -> None:
        """Stop the sweep: SIGINT (it stops its trainers and writes what it measured), SIGKILL after the grace."""
        if not self.running or self.process is None:
            return
        self.cancelled = True
        self.process.request_stop(STOP_GRACE_S, signal.SIGINT)
        self.cancel_button.setEnabled(False)
        self.progress_view.show_status("Stopping the sweep (it stops its trainers and writes what it measured)…")

    def stop_now(self) -> None:
        """The app is quitting: stop the sweep and wait for it (bounded), then kill what is left."""
        if not self.running or self.process is None:
            return
        self.process.request_stop(min(STOP_GRACE_S, QUIT_WAIT_S), signal.SIGINT)
        deadline = QtCore.QDeadlineTimer(int(QUIT_WAIT_S * 1000) + 2000)
        while self.process.alive and not deadline.hasExpired():
            self.process.update()
            QtCore.QThread.msleep(POLL_MS)
        if self.process.alive:
            self.process.kill()

    def poll(self) -> None:
        """Advance the sweep's process, read its new output, and finish when it has ended (the timer calls this)."""
        process = self.process
        if process is None:
            return
        process.update()
        self._seen_lines, missed, lines = process.output.since(self._seen_lines)
        self.progress_view.add_output(lines, missed)
        for line in lines:
            progress = parse_progress(line)
            if progress is not None:
                self._note_progress(progress)
        if not process.alive:
            self.timer.stop()
            self._finish(process)

    # ---- Layout --------------------------------------------------------------------------------------------------

    def _build(self, cpu_count: int | None, gpu_count: int) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        self.form = QtSweepForm(cpu_count=cpu_count, gpu_count=gpu_count)
        self.form.sig_checked.connect(self._checked)
        layout.addWidget(self.form)
        self.progress_view = QtSweepProgress()
        layout.addWidget(self.progress_view, 1)
        self.report_button = QtWidgets.QPushButton("Open report")
        self.report_button.clicked.connect(self._open_report)
        self.session_button = QtWidgets.QPushButton("Open sweep.db in a window")
        self.session_button.clicked.connect(self._open_session)
        self.ok_button = QtWidgets.QPushButton("Run sweep")
        self.ok_button.setDefault(True)
        self.ok_button.clicked.connect(self.start)
        self.cancel_button = QtWidgets.QPushButton("Cancel sweep")
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button = QtWidgets.QPushButton("Close")
        self.close_button.clicked.connect(self.reject)
        for button in (self.report_button, self.session_button, self.cancel_button):
            button.setEnabled(False)
        for button in (self.ok_button, self.cancel_button, self.close_button):
            button.setAutoDefault(False)
        layout.addWidget(row(self.report_button, self.session_button, None, self.ok_button, self.cancel_button,
                             self.close_button))
        self.resize(640, 760)

    # ---- Slots ---------------------------------------------------------------------------------------------------

    def _checked(self, ok: bool) -> None:
        """The form was checked again: Run is enabled only when it has no errors and no sweep runs."""
        self.ok_button.setEnabled(ok and not self.running)

    def reject(self) -> None:
        """Close, unless a sweep runs: then cancel it first (the dialog closes itself once it ended)."""
        if self.running:
            self._close_when_done = True
            self.cancel()
            return
        super().reject()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        if self.running:
            event.ignore()
            self.reject()
            return
        super().closeEvent(event)

    def _note_progress(self, progress: SweepProgress) -> None:
        self.progress.append(progress)
        self.progress_view.show_progress(progress)
        self.sig_progressed.emit(progress.text())

    def _finish(self, process: ManagedProcess) -> None:
        request = self.running_request
        code = process.returncode
        self._set_running(False)
        if request is not None and request.session_path.is_file() and is_default_out_folder(request.out):
            self.form.out_edit.setText(default_out_folder())  # the next sweep gets a new folder of its own
        self.form.revalidate()  # a folder holding a session is refused: the same sweep cannot run into it again
        reported = request is not None and request.report_path.is_file()
        has_session = request is not None and request.session_path.is_file()
        self.report_button.setEnabled(reported)
        self.session_button.setEnabled(has_session)
        failed = [p for p in self.progress if p.event == "failed"]
        if self.cancelled:
            done = len([p for p in self.progress if p.event in ("done", "failed")])
            total = self.progress_view.progress_bar.maximum()
            text = f"Sweep stopped: {done} of {total} configuration(s) ran to their end"
            text += "; the report shows what was measured." if reported else "."
        elif code == 0 and request is not None:
            text = f"Sweep finished: report {request.report_path}"
        elif code == 1 and reported:
            text = f"Sweep finished, {len(failed)} configuration(s) failed (the report says why)"
        else:
            tail = "\n".join(process.last_lines(6))
            text = f"The sweep did not run: {process.describe()}" + (f"\n{tail}" if tail else "")
        self.progress_view.show_status(text, alert=not (code == 0 or self.cancelled))
        self.sig_progressed.emit(text.splitlines()[0])
        if reported and not self.cancelled:
            self._open_report()
        self.sig_finished.emit(code if code is not None and process.state != "killed" else -1)
        if self._close_when_done:
            self._close_when_done = False
            super().reject()

    def _set_running(self, running: bool) -> None:
        self.form.set_running(running)
        self.progress_view.progress_bar.setVisible(running or bool(self.progress))
        self.cancel_button.setEnabled(running)
        self.close_button.setEnabled(True)
        self.ok_button.setEnabled(not running)
        if running:
            self.report_button.setEnabled(False)
            self.session_button.setEnabled(False)

    def _open_report(self) -> None:
        if self.running_request is not None:
            self._open_url(QtCore.QUrl.fromLocalFile(str(self.running_request.report_path)))

    def _open_session(self) -> None:
        if self.running_request is not None:
            self.sig_open_session_requested.emit(str(self.running_request.session_path))
