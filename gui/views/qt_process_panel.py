"""``QtProcessPanel``: the launched processes, their live output, Stop / Re-run / Launch.

A 10 Hz timer on the Qt thread drives the core ``Launcher`` (``poll``) and copies new lines from its bounded
per-process buffers into the output view; reader threads never touch a widget. The panel is the launcher's one
poller. It owns no process state: everything shown is read from the launcher.
"""

from __future__ import annotations

import json

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.launch import FINAL_STATES, Launcher, LaunchError, LaunchSpec, ManagedProcess, Run
from ringscope.gui.core.launch.slurm import FOLLOWER_NAME, job_state_line
from ringscope.gui.views import theme
from ringscope.gui.views.qt_launch_dialog import QtLaunchDialog

RECENT_KEY = "launch/recent"
RECENT_MAX = 10
TICK_MS = 100
_COLUMNS = ("Run", "Process", "State", "PID", "Exit code")


class QtProcessPanel(QtWidgets.QWidget):
    """Process list + output of the selected process, over a core ``Launcher``.

    Args:
        launcher: the core launcher (the panel polls it; nothing else should).
        settings: where recent launches are kept (default: the application's ``QSettings``).
        grace_s: how long Stop waits after SIGTERM/SIGINT before it forces a SIGKILL.
    """

    sig_run_started = QtCore.Signal(str)
    """A launch started (argument: its run id); emitted for launches started here or directly on the launcher."""

    sig_run_finished = QtCore.Signal(str, bool)
    """Every process of a launch has ended (arguments: run id, True when all exited with code 0)."""

    sig_sweep_requested = QtCore.Signal(object)
    """The launch dialog's Sweep… button was clicked (argument: ``QtLaunchDialog.sweep_values()``)."""

    sig_stop_requested = QtCore.Signal(str)
    """The user asked a launch to stop (argument: its run id); emitted before the launcher signals its processes."""

    def __init__(self, launcher: Launcher, parent: QtWidgets.QWidget | None = None,
                 settings: QtCore.QSettings | None = None, grace_s: float = 10.0) -> None:
        super().__init__(parent)
        self.launcher = launcher
        self.grace_s = grace_s
        self._settings = settings if settings is not None else QtCore.QSettings("Ringscope", "Ringscope")
        self._rows: list[ManagedProcess] = []
        self._job_states: dict[ManagedProcess, tuple[int, str | None]] = {}  # Slurm followers: (lines seen, state)
        self._known_runs: set[str] = set()
        self._finished_runs: set[str] = set()
        self._shown: ManagedProcess | None = None
        self._seen_lines = 0
        self._build()
        self._timer = QtCore.QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()

    # ---- Public API ------------------------------------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> Run:
        """Start ``spec`` through the launcher, remember it in "Recent". Raises ``LaunchError`` if invalid."""
        run = self.launcher.start(spec)
        self._remember(spec)
        self.refresh()
        return run

    def recent(self) -> list[LaunchSpec]:
        """Recent launches, newest first (malformed saved entries are skipped)."""
        try:
            saved = json.loads(str(self._settings.value(RECENT_KEY, "[]")))
        except ValueError:
            return []
        specs = []
        for data in saved if isinstance(saved, list) else []:
            try:
                specs.append(LaunchSpec.from_dict(data))
            except (ValueError, TypeError, AttributeError):
                continue
        return specs

    def selected_process(self) -> ManagedProcess | None:
        """The process whose output is shown."""
        return self._shown

    def select_process(self, process: ManagedProcess) -> None:
        """Show ``process``'s output."""
        if process in self._rows:
            self.table.selectRow(self._rows.index(process))

    def refresh(self) -> None:
        """One tick: poll the launcher, update rows, append new output, emit run signals."""
        self.launcher.poll()
        for run in self.launcher.runs:
            if run.run_id not in self._known_runs:
                self._add_run(run)
        for row, process in enumerate(self._rows):
            self._update_row(row, process)
        self._append_output()
        self._update_buttons()
        for run in self.launcher.runs:
            if run.run_id not in self._finished_runs and not run.alive:
                self._finished_runs.add(run.run_id)
                self.sig_run_finished.emit(run.run_id, run.ok)

    # ---- Building ----------------------------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        bar = QtWidgets.QHBoxLayout()
        self.launch_button = QtWidgets.QPushButton("Launch…")
        self.launch_button.setToolTip("Start a training whose agents report to this window")
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.rerun_button = QtWidgets.QPushButton("Re-run")
        self.rerun_button.setToolTip("Start the selected launch again with a new run id")
        self.status_label = QtWidgets.QLabel()
        self.status_label.setStyleSheet(f"color: {theme.ALERT_COLOR};")
        for widget in (self.launch_button, self.stop_button, self.rerun_button):
            bar.addWidget(widget)
        bar.addWidget(self.status_label, 1)
        layout.addLayout(bar)

        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        self.table = QtWidgets.QTableWidget(0, len(_COLUMNS))
        self.table.setHorizontalHeaderLabels(_COLUMNS)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(QtCore.Qt.TextElideMode.ElideLeft)  # run ids differ at their end
        for column, width in enumerate((120, 90, 70, 70)):
            self.table.setColumnWidth(column, width)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        splitter.addWidget(self.table)

        right = QtWidgets.QWidget()
        right_layout = QtWidgets.QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        self.exit_label = QtWidgets.QLabel()
        self.exit_label.setWordWrap(True)
        self.exit_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.exit_label.setVisible(False)
        right_layout.addWidget(self.exit_label)
        self.output = QtWidgets.QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setMaximumBlockCount(5000)  # the core buffer holds the rest of the story
        self.output.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.output.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        right_layout.addWidget(self.output, 1)
        splitter.addWidget(right)
        splitter.setSizes([430, 570])
        layout.addWidget(splitter, 1)

        self.launch_button.clicked.connect(self.open_launch_dialog)
        self.stop_button.clicked.connect(self._stop_clicked)
        self.rerun_button.clicked.connect(self._rerun_clicked)
        self._update_buttons()

    # ---- Rows and output ---------------------------------------------------------------------------------------

    def _add_run(self, run: Run) -> None:
        self._known_runs.add(run.run_id)
        for process in run.processes:
            row = self.table.rowCount()
            self.table.insertRow(row)
            for column in range(len(_COLUMNS)):
                self.table.setItem(row, column, QtWidgets.QTableWidgetItem())
            self._rows.append(process)
        self.sig_run_started.emit(run.run_id)
        if self._shown is None or not self._shown.alive:
            self.select_process(run.processes[0])

    def _update_row(self, row: int, process: ManagedProcess) -> None:
        code = "" if process.returncode is None else str(process.returncode)
        state = process.state
        if process.name == FOLLOWER_NAME:  # a Slurm job: its scheduler state, as the follower last said it
            state = self._job_state(process) or state
        texts = (process.run_id, process.name, state, str(process.pid or ""), code)
        dead = process.state in ("failed", "killed")
        brush = QtGui.QBrush(QtGui.QColor(theme.ALERT_COLOR)) if dead else QtGui.QBrush()
        items = [self.table.item(row, column) for column in range(len(_COLUMNS))]
        if all(item is not None and item.text() == text for item, text in zip(items, texts, strict=True)):
            return
        for item, text in zip(items, texts, strict=True):
            if item is not None:
                item.setText(text)
                item.setForeground(brush)
                item.setToolTip(process.describe())
        wanted = min(self.table.fontMetrics().horizontalAdvance(state) + 16, 280)  # a job's state is wordier
        if wanted > self.table.columnWidth(2):
            self.table.setColumnWidth(2, wanted)

    def _job_state(self, process: ManagedProcess) -> str | None:
        """The latest ``job N <state>`` line of a Slurm follower, read from the lines it printed since last time."""
        seen, state = self._job_states.get(process, (0, None))
        total, _skipped, lines = process.output.since(seen)
        for line in lines:
            state = job_state_line(line) or state
        self._job_states[process] = (total, state)
        return state

    def _selection_changed(self) -> None:
        rows = {index.row() for index in self.table.selectionModel().selectedRows()}
        process = self._rows[min(rows)] if rows else None
        if process is self._shown:
            return
        self._shown = process
        self._seen_lines = 0
        self.output.clear()
        self._append_output()
        self._update_buttons()

    def _append_output(self) -> None:
        process = self._shown
        if process is None:
            self.exit_label.setVisible(False)
            return
        seen, missed, lines = process.output.since(self._seen_lines)
        self._seen_lines = seen
        if missed:
            lines.insert(0, f"[… {missed} earlier lines not kept: output buffer limit]")
        if lines:
            bar = self.output.verticalScrollBar()
            at_bottom = bar.value() >= bar.maximum() - 2
            self.output.appendPlainText("\n".join(lines))
            if at_bottom:
                bar.setValue(bar.maximum())
        self._show_exit(process)

    def _show_exit(self, process: ManagedProcess) -> None:
        if process.state not in FINAL_STATES:
            self.exit_label.setVisible(False)
            return
        failed = process.state in ("failed", "killed")
        # A few lines only: the full output stays readable below.
        text = process.describe(lines=4) if process.state == "failed" else process.describe()
        if process.state == "killed":
            text += "; last output:\n" + "\n".join(process.last_lines(4))
        color = theme.ALERT_COLOR if failed else theme.OK_COLOR
        self.exit_label.setStyleSheet(f"color: {color}; font-family: monospace;")
        if self.exit_label.text() != text:
            self.exit_label.setText(text)
        self.exit_label.setVisible(True)

    # ---- Buttons -----------------------------------------------------------------------------------------------

    def _selected_run(self) -> Run | None:
        return None if self._shown is None else self.launcher.run(self._shown.run_id)

    def _update_buttons(self) -> None:
        run = self._selected_run()
        stopping = run is not None and any(p.stop_requested_s is not None for p in run.processes)
        self.stop_button.setEnabled(run is not None and run.alive)
        self.stop_button.setText("Force stop" if stopping and run is not None and run.alive else "Stop")
        self.stop_button.setToolTip("Send SIGKILL now" if stopping else
                                    f"Ask the run to stop (SIGTERM; SIGKILL after {self.grace_s:g} s)")
        self.rerun_button.setEnabled(run is not None)

    def _stop_clicked(self) -> None:
        run = self._selected_run()
        if run is None:
            return
        self.sig_stop_requested.emit(run.run_id)  # its ranks going quiet now are stopping, not lost
        if any(p.stop_requested_s is not None for p in run.processes):
            self.launcher.kill(run.run_id)
        else:
            self.launcher.request_stop(run.run_id, self.grace_s)
        self.refresh()

    def _rerun_clicked(self) -> None:
        run = self._selected_run()
        if run is not None:
            self._start_reporting(run.spec.with_new_run_id())

    def open_launch_dialog(self) -> Run | None:
        """Show the launch dialog (with this launcher's validation and the recent launches); start what is accepted."""
        dialog = QtLaunchDialog(launcher_validate=self.launcher.validate, recent=self.recent(), parent=self,
                                batch_script=self.launcher.batch_script)
        dialog.sig_sweep_requested.connect(self.sig_sweep_requested)
        try:
            if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
                return self._start_reporting(dialog.spec())
            return None
        finally:
            dialog.deleteLater()  # this panel is its parent: kept, it would pile up a dialog per opening

    def _start_reporting(self, spec: LaunchSpec) -> Run | None:
        try:
            run = self.start(spec)
        except LaunchError as error:
            self.status_label.setText("; ".join(error.errors))
            return None
        self.status_label.clear()
        return run

    def _remember(self, spec: LaunchSpec) -> None:
        data = spec.to_dict()
        saved = [s.to_dict() for s in self.recent()]
        saved = [data] + [s for s in saved if s != data]
        self._settings.setValue(RECENT_KEY, json.dumps(saved[:RECENT_MAX]))
        self._settings.sync()
