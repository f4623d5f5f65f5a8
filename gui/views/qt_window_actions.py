"""The main window's menus and what they do: File (launch, stop, sweep, open a recording, export the selected
run, compare, the agents' access token, preferences, quit), Run (hang details, the agents' own actions) and View
(the docks), with the slots behind them.

``WindowActions`` is a mixin of ``ringscope.gui.views.qt_main_window.QtMainWindow``: it reads the window's parts
(runs, launcher, process panel and docks, status bar, preferences, the selected run) and owns the dialogs and
background jobs it opens (sweep dialog, comparison, export). Frames, run selection and layout stay in the window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.views.qt_access_token import show_access_token
from ringscope.gui.views.qt_background import start_background
from ringscope.gui.views.qt_hang import QtHangDialog
from ringscope.gui.views.qt_preferences import QtPreferencesDialog, save_preferences
from ringscope.gui.views.qt_report_actions import ExportJob, ask_export_target, compare_sessions, exporter_for
from ringscope.gui.views.qt_run_compare import QtRunCompare, compare_runs_work
from ringscope.gui.views.qt_stacks import RunAgentActions
from ringscope.gui.views.qt_sweep import QtSweepDialog


class WindowActions:
    """The menus and their slots (a mixin of ``QtMainWindow``; see the module docstring)."""

    # what the window gives the actions (set in QtMainWindow.__init__)
    runs: Any
    launcher: Any
    process_panel: Any
    process_dock: Any
    status: Any
    preferences: Any
    selected_run_id: str | None
    session_source: Callable[..., Any] | None
    access_token: str | None
    sweep_dialog: QtSweepDialog | None
    export_job: ExportJob | None
    compare_dialog: QtRunCompare | None
    compare_job: Any
    runs_table: Any
    runs_dock: Any
    ranks_dock: Any
    read_only: str | None
    sig_open_requested: Any

    def _build_actions(self) -> None:
        """The File, Run and View menus (after the layout: View lists its docks)."""
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        no_launcher = "" if self.launcher is not None else (
            "read-only: a recorded session" if self.read_only is not None else "no launcher in this window")
        self.action_launch = self._action(file_menu, "&Launch…", "Ctrl+L", self._launch, no_launcher)
        self.action_stop = self._action(file_menu, "&Stop training", "Ctrl+.", self._stop, no_launcher)
        # a sweep records into a session of its own (DIR/sweep.db): no launcher needed, a read-only window runs it
        self.action_sweep = self._action(file_menu, "S&weep…", "Ctrl+Shift+W", self.open_sweep_dialog, "")
        file_menu.addSeparator()
        self.action_open = self._action(file_menu, "&Open session…", "Ctrl+O", self._open_session, "")
        self.action_export = self._action(file_menu, "&Export report of the selected run…", "Ctrl+E", self._export,
                                          "")
        file_menu.addAction(self.runs_table.compare_action)
        self.action_compare = self._action(file_menu, "&Compare sessions…", "Ctrl+Shift+C", self._compare, "")
        file_menu.addSeparator()
        self.action_token = self._action(
            file_menu, "Agent &access token…", "", self.show_access_token,
            "" if self.access_token else "this window accepts agents without a token (start it with --secure)")
        file_menu.addSeparator()
        self.action_preferences = self._action(file_menu, "&Preferences…", "Ctrl+,", self.open_preferences, "")
        self._action(file_menu, "&Quit", "Ctrl+Q", self.close, "")
        run_menu = menu.addMenu("&Run")
        run_menu.addAction(self.runs_table.compare_action)
        self.action_hang = self._action(run_menu, "&Hang details…", "Ctrl+H", self.show_hang_details, "")
        self.agent_actions = RunAgentActions(self, run_menu)  # Dump stacks, Telemetry settings… (asking the agents)
        view_menu = menu.addMenu("&View")
        view_menu.addAction(self.runs_dock.toggleViewAction())
        view_menu.addAction(self.ranks_dock.toggleViewAction())
        if self.process_dock is not None:
            view_menu.addAction(self.process_dock.toggleViewAction())

    def _action(self, menu: QtWidgets.QMenu, text: str, shortcut: str, slot: Callable[[], object],
                unavailable: str) -> QtGui.QAction:
        action = QtGui.QAction(text, self)
        action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(slot)
        if unavailable:
            action.setEnabled(False)
            action.setToolTip(unavailable)
            action.setStatusTip(unavailable)
        menu.setToolTipsVisible(True)
        menu.addAction(action)
        self.addAction(action)
        return action

    # ---- Slots ---------------------------------------------------------------------------------------------------

    def show_hang_details(self) -> QtHangDialog | None:
        """Show the selected run's hang verdict and the stuck ranks' stacks (the last one, if it recovered)."""
        return self.agent_actions.show_hang_details()

    def open_preferences(self) -> None:
        """Show the preferences dialog; save and apply what the user accepts."""
        dialog = QtPreferencesDialog(self.preferences, self)
        try:
            if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
                prefs = dialog.result_preferences()
                save_preferences(prefs)
                self.apply_preferences(prefs)
        finally:
            dialog.deleteLater()  # the window is its parent: kept, it would pile up a dialog per opening

    def _launch(self) -> None:
        if self.process_panel is None:  # no launcher: the action is disabled, with a tooltip saying so
            return
        self.process_panel.open_launch_dialog()  # it validates, remembers recent launches and shows errors
        if self.process_dock is not None:
            self.process_dock.raise_()

    def start_launch(self, spec: Any) -> None:
        """Start a launch spec (the demo, a dialog's result) and show the processes dock.

        A spec the launcher refuses (``LaunchError``: bad options, port in use...) is shown to the user, not raised.
        """
        if self.process_panel is None:
            return
        try:
            self.process_panel.start(spec)
            if self.process_dock is not None:
                self.process_dock.raise_()
        except Exception as exc:  # LaunchError carries .errors; anything else still must not kill the window
            errors = getattr(exc, "errors", None) or [str(exc)]
            QtWidgets.QMessageBox.warning(self, "Launch refused", "\n".join(f"• {e}" for e in errors))

    def open_sweep_dialog(self) -> QtSweepDialog:
        """Show the sweep dialog (one per window, kept while its sweep runs); its progress goes to the status bar
        too, and its session opens in a read-only window like File > Open session…"""
        if self.sweep_dialog is None:
            self.sweep_dialog = QtSweepDialog(self)
            self.sweep_dialog.sig_progressed.connect(lambda text: self.status.showMessage(f"Sweep: {text}", 30_000))
            self.sweep_dialog.sig_open_session_requested.connect(self.sig_open_requested.emit)
        self.sweep_dialog.show()
        self.sweep_dialog.raise_()
        self.sweep_dialog.activateWindow()
        return self.sweep_dialog

    def _stop(self) -> None:
        if self.launcher is not None:
            if self.runs is not None:
                self.runs.note_stop_requested(None)  # their ranks going quiet now are stopping, not lost
            self.launcher.request_stop(None)  # SIGTERM to every run now, SIGKILL after the grace period

    def _export(self) -> ExportJob | None:
        run_id = self.selected_run_id
        target = ask_export_target(self, f"ringscope-{_file_part(run_id)}.html" if run_id else
                                   "ringscope-report.html")
        return self.export_selected_run(*target) if target is not None else None

    def export_selected_run(self, kind: str, path: str) -> ExportJob:
        """Export the run shown (``kind``: html, pdf, csv or trace) in the background; the status bar names the
        files when they are written. The run's data is loaded on the export thread (the recording, or its store)."""
        run_id = self.selected_run_id
        job = exporter_for(self).start(lambda: self.runs_data([run_id])[0], kind, path,
                                       self.preferences.price_per_gpu_hour or None)
        self.watch_export(job)
        return job

    def watch_export(self, job: ExportJob) -> None:
        """When ``job`` has written its files, name them in the status bar with Open / Show in folder; if it
        failed, say why there (in red) too."""
        self.export_job = job
        job.sig_finished.connect(self.status.export_notice.show_paths)
        job.sig_failed.connect(self.status.export_notice.show_failure)

    def _compare(self) -> None:
        job = compare_sessions(self)
        if job is not None:
            self.watch_export(job)

    def compare_runs(self, run_ids: Sequence[str]) -> QtRunCompare:
        """Open the comparison overlay of two runs; the analysis runs on a worker thread and fills it when done."""
        ids = list(run_ids)[:2]
        note = ("each whole run, from the recording" if self.session_source is not None else
                "from the live stores: each run's last steps only (this window records nothing)")
        dialog = QtRunCompare(ids, self, source_note=note)
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        job = start_background(compare_runs_work(self.runs_data, ids, self.preferences.price_per_gpu_hour or None),
                               f"comparing runs {ids[0]} and {ids[1]}")
        job.sig_done.connect(dialog.show_comparison)
        job.sig_failed.connect(dialog.show_error)
        self.compare_dialog, self.compare_job = dialog, job
        return dialog

    def _open_session(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a recorded session", "",
                                                        "Ringscope sessions (*.db);;All files (*)")
        if path:
            self.sig_open_requested.emit(path)

    def show_access_token(self) -> QtWidgets.QDialog | None:
        """Show the token agents need (``--secure``), with a Copy button; returns the dialog (shown, non-modal)."""
        return show_access_token(self, self.access_token) if self.access_token else None


def _file_part(run_id: str) -> str:
    """A run id as a safe file-name part."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)[:80] or "run"
