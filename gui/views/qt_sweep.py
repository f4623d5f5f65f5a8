"""``QtSweepDialog``: run a scaling sweep / framework bake-off (``ringscope sweep``) from the window.

The form has every option of ``ringscope sweep``: the reference trainers, or *My script* (``--script``,
``--script-args``: the user's own script through the zero-code launch; the reference trainers' fields are disabled
then, as the CLI refuses them). It is held as a ``SweepRequest``, checked on every change by the CLI's own checks
(``ringscope.gui.core.sweep.progress.request_errors``), and its command line is ``sweep_argv``'s, so the dialog runs
exactly
what the CLI would. The messages are shown inline and Run stays disabled while there are any. ``prefill`` takes the
values a launch shares with a sweep (the launch dialog's Sweep… button).

Run starts ``python -m ringscope.gui.cli sweep ...`` as a child process (``ManagedProcess``: own process group, output
read by a
thread); a timer on the GUI thread advances it and reads its progress lines ("config 3 of 6: ddp, 2 ranks"). Cancel
sends SIGINT (the sweep stops its trainers and writes what it measured), then SIGKILL to everything left after a
grace period. At the end the report (DIR/sweep.html) is opened and the session (DIR/sweep.db) is offered for opening
in a window. The dialog does not close while its sweep runs: closing it cancels the sweep first.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Mapping

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.launch.demo import gpu_count as detect_gpus
from ringscope.gui.core.launch.options import OPTIONS_BY_KEY
from ringscope.gui.core.launch.plan import ProcessPlan
from ringscope.gui.core.launch.process import ManagedProcess
from ringscope.gui.core.sweep.plan import COMM_DELAY_FRAMEWORKS, DATASETS, DEVICES, FRAMEWORK_TITLES, FRAMEWORKS
from ringscope.gui.core.sweep.progress import (
    SweepProgress,
    SweepRequest,
    default_out_folder,
    is_default_out_folder,
    parse_comm_delays,
    parse_progress,
    request_errors,
    sweep_argv,
    sweep_env,
)
from ringscope.gui.views import theme

POLL_MS = 100
STOP_GRACE_S = 30.0  # after Cancel the sweep still writes its reports (PDF included) before it exits
OUTPUT_LINES = 2000
LOG_LINES = 500
QUIT_WAIT_S = 10.0
MAX_TIMEOUT_S = 7 * 24 * 3600
REFERENCE_ONLY_TIP = ("Configures the reference trainers only; give your script its own settings (steps, batch size, "
                      "model) in Script arguments, e.g. --steps 200 --batch-size 64")


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
        self.cpu_count = cpu_count if cpu_count is not None else os.cpu_count()
        self.gpu_count = gpu_count if gpu_count is not None else detect_gpus()
        self._open_url = open_url
        self.process: ManagedProcess | None = None
        self.running_request: SweepRequest | None = None
        self.progress: list[SweepProgress] = []  # every progress line of the sweep running (or last run)
        self.cancelled = False
        self._seen_lines = 0
        self._close_when_done = False
        self._build()
        self.load(initial or SweepRequest(frameworks=("ddp",), ranks="1,2", out=default_out_folder()))
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        app = QtWidgets.QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop_now)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def request(self) -> SweepRequest:
        """The sweep the form describes (with *My script*: the script and its arguments, no delays)."""
        script = self.script_radio.isChecked()
        return SweepRequest(
            frameworks=tuple(name for name, box in self.framework_boxes.items() if box.isChecked()),
            ranks=self.ranks_edit.text().strip(), out=self.out_edit.text().strip(), steps=self.steps_spin.value(),
            model_width=self.width_spin.value(), model_depth=self.depth_spin.value(),
            batch_size=self.batch_spin.value(), dataset=self.dataset_combo.currentText(),
            device=self.device_combo.currentText(), price_per_gpu_hour=self.price_spin.value() or None,
            timeout_per_run_s=float(self.timeout_spin.value()), comm_delays={} if script else self.comm_delays()[0],
            script=self.script_edit.text().strip() if script else None,
            script_args=self.script_args_edit.text().strip() if script else "")

    def command(self) -> list[str]:
        """The command line the form's sweep runs (``sweep_argv``: the one the CLI would be typed with)."""
        return sweep_argv(self.request())

    def comm_delays(self) -> tuple[dict[str, float], list[str]]:
        """The injected all-reduce delays typed (``ddp:2=40, ddp:4=40``), parsed by the CLI's parser, and a message
        for each entry it refuses."""
        return parse_comm_delays(self.delay_edit.text())

    def errors(self) -> list[str]:
        """Every reason the form's sweep cannot start: the CLI's checks, on the whole plan once the rest is valid."""
        request = self.request()
        errors = request_errors(request, cpu_count=self.cpu_count, gpu_count=self.gpu_count)
        return errors + (self.comm_delays()[1] if request.script is None else [])

    def load(self, request: SweepRequest) -> None:
        """Fill the form from ``request``."""
        self.reference_radio.setChecked(True)  # ticks as given: a script's one framework is checked, not imposed
        for name, box in self.framework_boxes.items():
            box.setChecked(name in request.frameworks)
        self.ranks_edit.setText(request.ranks)
        self.steps_spin.setValue(request.steps)
        self.width_spin.setValue(request.model_width)
        self.depth_spin.setValue(request.model_depth)
        self.batch_spin.setValue(request.batch_size)
        self.dataset_combo.setCurrentText(request.dataset)
        self.device_combo.setCurrentText(request.device)
        self.price_spin.setValue(request.price_per_gpu_hour or 0.0)
        self.timeout_spin.setValue(round(request.timeout_per_run_s))
        self.delay_edit.setText(_delays_text(request.comm_delays))
        self.script_edit.setText(request.script or "")
        self.script_args_edit.setText(request.script_args)
        self.script_radio.setChecked(request.script is not None)
        self.out_edit.setText(request.out)
        self._apply_training()
        self.revalidate()

    def prefill(self, values: Mapping[str, object]) -> None:
        """Fill the form from what a launch shares with a sweep (the launch dialog's ``sig_sweep_requested``).

        Keys: ``frameworks`` (sweep names, e.g. ``tf-mirrored``, or launch kinds, e.g. ``tf_mirrored``), ``ranks``,
        ``steps``, ``model_width``, ``model_depth``, ``batch_size``, ``dataset``, ``device`` (``cuda`` is ``gpu``),
        ``price_per_gpu_hour``, ``timeout_per_run_s``, ``comm_delays`` (``{"ddp:2": 40.0}``) and ``out``. Unknown
        keys, and values a field cannot take, are ignored; without a known framework the ticks stay as they are.
        Nothing changes while a sweep runs: the form shows that sweep.
        """
        if self.running:
            return
        frameworks = _framework_names(values.get("frameworks"))
        if frameworks:
            for name, box in self.framework_boxes.items():
                box.setChecked(name in frameworks)
        for key, spin in self._number_fields().items():
            number = values.get(key)
            if isinstance(number, bool) or not isinstance(number, int | float):
                continue
            if spin.minimum() <= number <= spin.maximum():
                if isinstance(spin, QtWidgets.QDoubleSpinBox):
                    spin.setValue(float(number))
                elif float(number).is_integer():
                    spin.setValue(int(number))
        for key, combo in (("dataset", self.dataset_combo), ("device", self.device_combo)):
            text = values.get(key)
            text = "gpu" if text == "cuda" else text
            if isinstance(text, str) and combo.findText(text) >= 0:
                combo.setCurrentText(text)
        ranks = values.get("ranks")
        if isinstance(ranks, Iterable) and not isinstance(ranks, str):
            ranks = ",".join(str(n) for n in ranks)
        if isinstance(ranks, str):
            self.ranks_edit.setText(ranks)
        delays = values.get("comm_delays")
        if isinstance(delays, Mapping):
            delays = _delays_text(delays)
        if isinstance(delays, str):
            self.delay_edit.setText(delays)
        if isinstance(values.get("out"), str):
            self.out_edit.setText(str(values["out"]))
        self.revalidate()

    @property
    def running(self) -> bool:
        """True while the sweep's process is alive (also while it is stopping)."""
        return self.process is not None and self.process.alive

    def start(self) -> bool:
        """Start the form's sweep; False (and nothing started) when the form has errors or one already runs."""
        if self.running or self.revalidate():
            return False
        request = self.request()
        self.running_request, self.progress, self.cancelled, self._seen_lines = request, [], False, 0
        self.log_view.clear()
        self.process = ManagedProcess(ProcessPlan("sweep", sweep_argv(request), sweep_env()), "sweep", OUTPUT_LINES)
        self.progress_bar.setRange(0, max(request.configuration_count(), 1))
        self.progress_bar.setValue(0)
        self._show_status(f"Starting {request.configuration_count()} configuration(s)…")
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
        self._show_status("Stopping the sweep (it stops its trainers and writes what it measured)…")

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
        if missed:
            self.log_view.appendPlainText(f"… {missed} line(s) not shown")
        for line in lines:
            self.log_view.appendPlainText(line)
            progress = parse_progress(line)
            if progress is not None:
                self._note_progress(progress)
        if not process.alive:
            self.timer.stop()
            self._finish(process)

    # ---- Layout --------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        self._form = form = QtWidgets.QFormLayout()
        self.reference_radio = QtWidgets.QRadioButton("Reference trainer")
        self.reference_radio.setToolTip("the bundled trainer of each framework, on the same model, data and batch")
        self.script_radio = QtWidgets.QRadioButton("My script")
        self.script_radio.setToolTip("your own training script, unmodified, through the zero-code launch (as "
                                     "ringscope run); one framework")
        self._training_group = QtWidgets.QButtonGroup(self)
        form.addRow("Training", self._row(self.reference_radio, self.script_radio, stretch=True))
        for radio in (self.reference_radio, self.script_radio):
            self._training_group.addButton(radio)
        self.script_radio.toggled.connect(self._training_changed)
        self.script_edit = self._line_edit("path/to/train.py", "your training script (a .py file), run in every "
                                           "configuration (ringscope sweep --script)")
        self.script_browse_button = QtWidgets.QPushButton("Browse…")
        self.script_browse_button.clicked.connect(self._browse_script)
        self._script_row = self._row(self.script_edit, self.script_browse_button)
        form.addRow("Script", self._script_row)
        self.script_args_edit = self._line_edit("none; e.g. --epochs 1 --batch-size 64", "your script's arguments, the "
                                                "same in every configuration (ringscope sweep --script-args)")
        form.addRow("Script arguments", self.script_args_edit)
        self.framework_boxes: dict[str, QtWidgets.QCheckBox] = {}
        for name in FRAMEWORKS:
            box = self.framework_boxes[name] = QtWidgets.QCheckBox(name)
            box.setToolTip(FRAMEWORK_TITLES[name])
            box.toggled.connect(lambda checked, name=name: self._framework_toggled(name, checked))
        form.addRow("Frameworks", self._row(*self.framework_boxes.values(), stretch=True))
        self.ranks_edit = self._line_edit("1,2,4", "comma-separated rank counts, 1 included (the baseline of scaling "
                                          "efficiency)")
        form.addRow("Rank counts", self.ranks_edit)
        self.steps_spin = self._spin(1, 1_000_000, "optimizer steps per run")
        form.addRow("Steps per run", self.steps_spin)
        self.width_spin = self._spin(1, 65_536, "hidden units per MLP layer")
        form.addRow("Model width", self.width_spin)
        depth = OPTIONS_BY_KEY["model-depth"]
        self.depth_spin = self._spin(int(depth.minimum or 1), int(depth.maximum or 256), "hidden layers of the MLP")
        form.addRow("Model depth", self.depth_spin)
        self.batch_spin = self._spin(1, 1_000_000, "samples per rank per step, the same in every configuration")
        form.addRow("Batch size per rank", self.batch_spin)
        self.dataset_combo = self._combo(DATASETS, "digits (scikit-learn, bundled) or synthetic")
        form.addRow("Dataset", self.dataset_combo)
        self.device_combo = self._combo(DEVICES, "auto: one GPU per rank when there are enough, else the CPU")
        form.addRow("Device", self.device_combo)
        self.price_spin = QtWidgets.QDoubleSpinBox()
        self.price_spin.setRange(0.0, 100_000.0)
        self.price_spin.setDecimals(2)
        self.price_spin.setPrefix("$")
        self.price_spin.setSpecialValueText(f"the agents' price, else ${DEFAULT_PRICE_PER_GPU_HOUR:.2f}")
        self.price_spin.setToolTip("what one GPU costs per hour, for the cost per 1000 samples (on the CPU each rank "
                                   "is priced as one GPU); at 0: the price the agents report, else "
                                   f"${DEFAULT_PRICE_PER_GPU_HOUR:.2f}")
        self.price_spin.valueChanged.connect(self.revalidate)
        form.addRow("Price per GPU-hour", self.price_spin)
        self.timeout_spin = self._spin(1, MAX_TIMEOUT_S, "a configuration still running after this long is stopped "
                                                         "(the sweep goes on with the next)")
        self.timeout_spin.setSuffix(" s")
        form.addRow("Timeout per configuration", self.timeout_spin)
        self.delay_edit = self._line_edit(
            "none; e.g. ddp:2=40 (FRAMEWORK:RANKS=MS, comma-separated)",
            "Advanced, to see what a slow network does: milliseconds added to every all-reduce of a configuration "
            f"(ringscope sweep --comm-delay-ms-for; {', '.join(COMM_DELAY_FRAMEWORKS)} only)")
        form.addRow("Injected all-reduce delay", self.delay_edit)
        self.out_edit = self._line_edit("", "sweep.db, sweep.csv, sweep.html and sweep.pdf are written here")
        self.browse_button = QtWidgets.QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        form.addRow("Output folder", self._row(self.out_edit, self.browse_button))
        self._reference_tips = {widget: widget.toolTip() for widget in (
            self.steps_spin, self.width_spin, self.depth_spin, self.batch_spin, self.dataset_combo, self.delay_edit)}
        self.form_widgets: list[QtWidgets.QWidget] = [
            self.reference_radio, self.script_radio, self.script_edit, self.script_browse_button,
            self.script_args_edit, *self.framework_boxes.values(), self.ranks_edit, *self._number_fields().values(),
            self.dataset_combo, self.device_combo, self.delay_edit, self.out_edit, self.browse_button]
        layout.addLayout(form)
        self.error_label = self._label()
        self.error_label.setStyleSheet(f"color: {theme.ALERT_COLOR};")
        layout.addWidget(self.error_label)
        self.status_label = self._label()
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
        layout.addWidget(self._row(self.report_button, self.session_button, None, self.ok_button, self.cancel_button,
                                   self.close_button))
        self.resize(640, 760)

    @staticmethod
    def _row(*widgets: QtWidgets.QWidget | None, stretch: bool = False) -> QtWidgets.QWidget:
        """``widgets`` side by side (None: the stretch between them; ``stretch``: one after them)."""
        row = QtWidgets.QWidget()
        box = QtWidgets.QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        for widget in widgets:
            if widget is None:
                box.addStretch(1)
            else:
                box.addWidget(widget, 1 if isinstance(widget, QtWidgets.QLineEdit) else 0)
        if stretch:
            box.addStretch(1)
        return row

    @staticmethod
    def _label() -> QtWidgets.QLabel:
        label = QtWidgets.QLabel()
        label.setWordWrap(True)
        label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    def _line_edit(self, placeholder: str, tip: str) -> QtWidgets.QLineEdit:
        edit = QtWidgets.QLineEdit()
        edit.setPlaceholderText(placeholder)
        edit.setToolTip(tip)
        edit.textChanged.connect(self.revalidate)
        return edit

    def _combo(self, items: Iterable[str], tip: str) -> QtWidgets.QComboBox:
        combo = QtWidgets.QComboBox()
        combo.addItems(list(items))
        combo.setToolTip(tip)
        combo.currentTextChanged.connect(self.revalidate)
        return combo

    def _spin(self, low: int, high: int, tip: str) -> QtWidgets.QSpinBox:
        spin = QtWidgets.QSpinBox()
        spin.setRange(low, high)
        spin.setGroupSeparatorShown(True)
        spin.setToolTip(tip)
        spin.valueChanged.connect(self.revalidate)
        return spin

    def _number_fields(self) -> dict[str, QtWidgets.QSpinBox | QtWidgets.QDoubleSpinBox]:
        """The numeric fields by their ``prefill`` key."""
        return {"steps": self.steps_spin, "model_width": self.width_spin, "model_depth": self.depth_spin,
                "batch_size": self.batch_spin, "price_per_gpu_hour": self.price_spin,
                "timeout_per_run_s": self.timeout_spin}

    def _apply_training(self) -> None:
        """Enable the fields the chosen training takes: a script's, or the reference trainers' (greyed with why)."""
        script = self.script_radio.isChecked()
        for widget in (self._script_row, self.script_args_edit):  # the row: its edit and Browse… alike
            widget.setEnabled(script)
            label = self._form.labelForField(widget)
            if label is not None:
                label.setEnabled(script)
        for widget, tip in self._reference_tips.items():
            widget.setEnabled(not script)
            widget.setToolTip(REFERENCE_ONLY_TIP if script else tip)
            label = self._form.labelForField(widget)
            if label is not None:
                label.setEnabled(not script)
                label.setToolTip(REFERENCE_ONLY_TIP if script else "")

    # ---- Slots ---------------------------------------------------------------------------------------------------

    def revalidate(self) -> list[str]:
        """Re-check the form: errors shown inline, Run enabled only when there are none. Returns the errors."""
        errors = self.errors()
        self.error_label.setText("\n".join(f"• {error}" for error in errors))
        self.error_label.setVisible(bool(errors))
        self.ok_button.setEnabled(not errors and not self.running)
        return errors

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

    def _training_changed(self) -> None:
        self._apply_training()
        self.revalidate()

    def _framework_toggled(self, name: str, checked: bool) -> None:
        if checked and self.script_radio.isChecked():  # a script is written for one framework: ticking one picks it
            for other, box in self.framework_boxes.items():
                if other != name:
                    box.setChecked(False)
        self.revalidate()

    def _note_progress(self, progress: SweepProgress) -> None:
        self.progress.append(progress)
        self.progress_bar.setRange(0, max(progress.total, 1))
        ran = progress.event in ("done", "failed")  # a stopped configuration did not run to its end
        self.progress_bar.setValue(progress.number if ran else progress.number - 1)
        text = progress.text()
        if progress.event == "failed" and progress.detail:
            text += f": {progress.detail}"
        self._show_status(text)
        self.sig_progressed.emit(progress.text())

    def _finish(self, process: ManagedProcess) -> None:
        request = self.running_request
        code = process.returncode
        self._set_running(False)
        if request is not None and request.session_path.is_file() and is_default_out_folder(request.out):
            self.out_edit.setText(default_out_folder())  # the next sweep gets a new folder of its own
        self.revalidate()  # a folder holding a session is refused: the same sweep cannot run into it again
        reported = request is not None and request.report_path.is_file()
        has_session = request is not None and request.session_path.is_file()
        self.report_button.setEnabled(reported)
        self.session_button.setEnabled(has_session)
        failed = [p for p in self.progress if p.event == "failed"]
        if self.cancelled:
            done = len([p for p in self.progress if p.event in ("done", "failed")])
            text = f"Sweep stopped: {done} of {self.progress_bar.maximum()} configuration(s) ran to their end"
            text += "; the report shows what was measured." if reported else "."
        elif code == 0 and request is not None:
            text = f"Sweep finished: report {request.report_path}"
        elif code == 1 and reported:
            text = f"Sweep finished, {len(failed)} configuration(s) failed (the report says why)"
        else:
            tail = "\n".join(process.last_lines(6))
            text = f"The sweep did not run: {process.describe()}" + (f"\n{tail}" if tail else "")
        self._show_status(text, alert=not (code == 0 or self.cancelled))
        self.sig_progressed.emit(text.splitlines()[0])
        if reported and not self.cancelled:
            self._open_report()
        self.sig_finished.emit(code if code is not None and process.state != "killed" else -1)
        if self._close_when_done:
            self._close_when_done = False
            super().reject()

    def _set_running(self, running: bool) -> None:
        for widget in self.form_widgets:
            widget.setEnabled(not running)
        if not running:
            self._apply_training()
        self.progress_bar.setVisible(running or bool(self.progress))
        self.cancel_button.setEnabled(running)
        self.close_button.setEnabled(True)
        self.ok_button.setEnabled(not running)
        if running:
            self.report_button.setEnabled(False)
            self.session_button.setEnabled(False)

    def _show_status(self, text: str, alert: bool = False) -> None:
        self.status_label.setText(text)
        self.status_label.setStyleSheet(f"color: {theme.ALERT_COLOR};" if alert else "")

    def _open_report(self) -> None:
        if self.running_request is not None:
            self._open_url(QtCore.QUrl.fromLocalFile(str(self.running_request.report_path)))

    def _open_session(self) -> None:
        if self.running_request is not None:
            self.sig_open_session_requested.emit(str(self.running_request.session_path))

    def _browse(self) -> None:
        path = QtWidgets.QFileDialog.getExistingDirectory(self, "Folder for the sweep's session and reports",
                                                          self.out_edit.text())
        if path:
            self.out_edit.setText(path)

    def _browse_script(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Your training script", self.script_edit.text(),
                                                        "Python (*.py);;All files (*)")
        if path:
            self.script_edit.setText(path)


def _framework_names(value: object) -> list[str]:
    """The sweep framework names in ``value`` (a name or several; launch kinds such as ``tf_mirrored`` accepted)."""
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else []
    words = [str(name).strip().lower().replace("_", "-") for name in names]
    return [word for word in words if word in FRAMEWORKS]


def _delays_text(delays: Mapping[str, float]) -> str:
    """``{"ddp:2": 40.0}`` -> ``ddp:2=40``, as the delay field is typed."""
    return ", ".join(f"{label}={ms:.15g}" for label, ms in delays.items())
