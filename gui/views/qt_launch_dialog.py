"""``QtLaunchDialog``: choose what to launch; the form is generated from the core's option table.

Every change re-runs the core's ``validate``; its messages are shown inline and OK stays disabled until the spec
is valid. The dialog holds no launch logic: ``spec()`` returns a ``LaunchSpec`` for the caller to start.
Its Sweep… button hands what a sweep shares with the launch (``sweep_values``) to whoever opens the sweep dialog.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.launch import (
    KIND_TITLES,
    KINDS,
    OPTIONS_BY_KEY,
    REFERENCE,
    LaunchKind,
    LaunchSpec,
    OptionSpec,
    OptionValue,
    default_options,
    format_env_lines,
    options_for,
    parse_env_lines,
    validate,
)
from ringscope.gui.core.launch import OPTIONS as OPTION_TABLE
from ringscope.gui.core.launch.options import Framework
from ringscope.gui.core.launch.remote import DEFAULT_RENDEZVOUS_PORT, DEFAULT_WORKER_PORT
from ringscope.gui.core.launch.slurm_settings import SlurmSettings
from ringscope.gui.core.launch.spec import new_run_id
from ringscope.gui.core.sweep.plan import FRAMEWORKS as SWEEP_FRAMEWORKS
from ringscope.gui.views import theme
from ringscope.gui.views.qt_slurm_fields import QtBatchScriptDialog, SlurmFields

_PROCESS_LABEL = {"ddp": "Ranks (processes)", "tf_mirrored": "Devices", "tf_multi_worker": "Worker processes",
                  "script": "Processes"}
_SWEEP_FRAMEWORK: Final[dict[LaunchKind, str]] = {kind: name for name, kind in SWEEP_FRAMEWORKS.items()}
_SWEEP_NUMBERS: Final[tuple[tuple[str, str], ...]] = (
    ("model_width", "model-width"), ("model_depth", "model-depth"), ("batch_size", "batch-size"), ("steps", "steps"))
"""``sweep_values`` key -> the trainer option it is read from."""
_SWEEP_DEVICE: Final[dict[str, str]] = {"cuda": "gpu"}  # the DDP trainer's word -> the sweep's


class QtLaunchDialog(QtWidgets.QDialog):
    """Launch dialog over the core's ``LaunchSpec`` / option table / ``validate``.

    Args:
        launcher_validate: checks a spec, returning messages (default ``ringscope.gui.core.launch.validate``; the app
            passes ``Launcher.validate`` so its collector endpoint is checked too).
        recent: recent launches, newest first, offered for re-running.
        initial: a spec to pre-fill (default: a 2-rank DDP run of the reference trainer).
    """

    sig_sweep_requested = QtCore.Signal(object)
    """The user asked for a sweep instead (the Sweep… button; the dialog has closed). Argument: ``sweep_values()``,
    a dict for ``QtSweepDialog.prefill``."""

    def __init__(
        self,
        launcher_validate: Callable[[LaunchSpec], list[str]] = validate,
        recent: Sequence[LaunchSpec] = (),
        parent: QtWidgets.QWidget | None = None,
        initial: LaunchSpec | None = None,
        batch_script: Callable[[LaunchSpec], str] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Launch a training")
        self._validate = launcher_validate
        # the Slurm batch script of a spec as the launcher will submit it (its collector endpoint); None: no preview
        self._batch_script = batch_script
        self._run_id = new_run_id()  # shown in the batch script and used by the launch, so a saved script matches
        self._recent = list(recent)
        self._loading = False
        self._build()
        self.load_spec(initial or LaunchSpec(options=default_options("ddp")))

    # ---- Public API ------------------------------------------------------------------------------------------

    def spec(self) -> LaunchSpec:
        """The launch described by the form (call ``errors()`` to know whether it can start). Its run id is the one
        the batch-script preview showed."""
        return replace(self._read_form()[0], run_id=self._run_id)

    def batch_script_dialog(self) -> QtBatchScriptDialog | None:
        """The viewer of the Slurm batch script this launch submits (None without a Slurm target or a preview)."""
        spec = self.spec()
        if spec.slurm is None or self._batch_script is None:
            return None
        return QtBatchScriptDialog(self._batch_script(spec), f"{spec.run_id}.sh", self)

    def errors(self) -> list[str]:
        """Every problem with the form: unparsable fields, then the core's validation messages."""
        spec, form_errors = self._read_form()
        return form_errors + self._validate(spec)

    def sweep_values(self) -> dict[str, object]:
        """What a sweep shares with the launch in the form: the framework in the sweep's words (none for a script
        launch) and, for the reference trainer, model width and depth, batch size per rank, steps, dataset and
        device (an empty field: the trainer's default). A number that does not parse is left out."""
        kind = self._kind()
        values: dict[str, object] = {}
        if kind in _SWEEP_FRAMEWORK:
            values["frameworks"] = (_SWEEP_FRAMEWORK[kind],)
        if not self.reference_radio.isChecked() or kind == "script":
            return values  # the sweep runs the reference trainers: a script's options are not theirs
        epochs = _option_value(self.option_widgets["epochs"])
        for key, ident in _SWEEP_NUMBERS:
            text = str(_option_value(self.option_widgets[ident]) or "")
            if not text and not (ident == "steps" and epochs):  # trains by --epochs: the sweep keeps its steps
                text = str(OPTIONS_BY_KEY[ident].default or "")
            if text.isdigit():
                values[key] = int(text)
        values["dataset"] = _option_value(self.option_widgets["dataset"]) or OPTIONS_BY_KEY["dataset"].default
        device = str(_option_value(self.option_widgets["device-ddp" if kind == "ddp" else "device-tf"]) or "auto")
        values["device"] = _SWEEP_DEVICE.get(device, device)
        return values

    def load_spec(self, spec: LaunchSpec) -> None:
        """Fill the form from ``spec`` (e.g. a recent launch)."""
        self._loading = True
        try:
            self.kind_combo.setCurrentIndex(KINDS.index(spec.kind))
            self.reference_radio.setChecked(spec.uses_reference)
            self.script_radio.setChecked(not spec.uses_reference)
            self.script_edit.setText("" if spec.uses_reference else spec.trainer)
            self.args_edit.setText(shlex.join(spec.script_args))
            self.zero_code_check.setChecked(spec.zero_code)
            self.restart_spin.setValue(spec.restart_max)
            self.python_edit.setText(spec.python)
            self.processes_spin.setValue(spec.processes)
            self.base_port_edit.setText("" if spec.base_port is None else str(spec.base_port))
            self.hosts_edit.setText(" ".join(spec.hosts))
            self.target_combo.setCurrentIndex(1 if spec.slurm is not None else 0)
            self.slurm.load(spec.slurm or SlurmSettings())
            self.ssh_user_edit.setText(spec.ssh_user or "")
            self.ssh_key_edit.setText(spec.ssh_key or "")
            for option in OPTION_TABLE:
                _set_option(self.option_widgets[option.ident], spec.options.get(option.name))
            self.working_dir_edit.setText(spec.working_dir or "")
            self.env_edit.setPlainText(format_env_lines(spec.env))
        finally:
            self._loading = False
        self._refresh()

    # ---- Building ----------------------------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        top = QtWidgets.QHBoxLayout()
        layout.addLayout(top, 1)
        form_box = QtWidgets.QWidget()
        form_column = QtWidgets.QVBoxLayout(form_box)
        form_column.setContentsMargins(0, 0, 0, 0)
        form = QtWidgets.QFormLayout()
        form_column.addLayout(form)
        form_column.addStretch(1)  # rows keep their natural height; spare room goes below them
        top.addWidget(form_box, 4)

        self.kind_combo = QtWidgets.QComboBox()
        for kind in KINDS:
            self.kind_combo.addItem(KIND_TITLES[kind], kind)
        form.addRow("Framework", self.kind_combo)

        self.reference_radio = QtWidgets.QRadioButton("Reference trainer")
        self.script_radio = QtWidgets.QRadioButton("My script")
        trainer_row = QtWidgets.QHBoxLayout()
        trainer_row.addWidget(self.reference_radio)
        trainer_row.addWidget(self.script_radio)
        trainer_row.addStretch(1)
        form.addRow("Trainer", trainer_row)
        self.script_edit = QtWidgets.QLineEdit()
        self.script_edit.setPlaceholderText("path/to/train.py")
        self._script_row = _with_browse(self.script_edit, self._browse_script)
        form.addRow("Script", self._script_row)
        self.args_edit = QtWidgets.QLineEdit()
        self.args_edit.setPlaceholderText("arguments, shell quoting")
        form.addRow("Arguments", self.args_edit)
        self.zero_code_check = QtWidgets.QCheckBox("Instrument automatically (no code change)")
        self.zero_code_check.setToolTip(
            "Ringscope's agent is injected into your unmodified script, as with 'ringscope run': PyTorch DDP "
            "models, DataLoaders and optimizer steps, Keras fit under a tf.distribute strategy, tf.function loops "
            "calling strategy.run.\nTurn it off for a script that reports through the agent itself "
            "(a script using instrument() or RingscopeCallback is measured once either way).")
        form.addRow("Ringscope", self.zero_code_check)
        self.restart_spin = QtWidgets.QSpinBox()
        self.restart_spin.setRange(0, 100)
        self.restart_spin.setSpecialValueText("never")
        self.restart_spin.setSuffix(" restart(s) at most")
        self.restart_spin.setToolTip(
            "When the run hangs, a process fails or a rank is lost, Ringscope keeps every rank's stacks in the "
            "recording, stops the whole job and starts it again as the next attempt of the same run (1 s later), "
            "at most this many times.\nThe script resumes from its own latest checkpoint (the reference trainers: "
            "set 'checkpoint every' and 'resume latest'). A stop from the window or a clean exit never restarts.")
        form.addRow("Restart automatically", self.restart_spin)
        self.python_edit = QtWidgets.QLineEdit()
        form.addRow("Python", self.python_edit)
        self.processes_spin = QtWidgets.QSpinBox()
        self.processes_spin.setRange(1, 1024)
        form.addRow("Processes", self.processes_spin)
        self.target_combo = QtWidgets.QComboBox()
        self.target_combo.addItems(["This machine, or hosts over SSH", "Slurm cluster (sbatch)"])
        self.target_combo.setToolTip(
            "Slurm: Ringscope writes a batch script (srun + torchrun with the rendezvous on the allocation's first "
            "node, or one MultiWorkerMirrored worker per task), submits it with sbatch and follows the job: its "
            "state (queued with Slurm's reason, running, finished / failed / cancelled / timeout) and output in the "
            "process panel. Stop is scancel. The nodes must reach this window's collector.")
        form.addRow("Target", self.target_combo)
        self.hosts_edit = QtWidgets.QLineEdit()
        self.hosts_edit.setPlaceholderText("empty: this machine; else node1 node2 … (started over SSH)")
        self.hosts_edit.setToolTip(
            "The nodes to run on, in node-rank order (the first hosts the rendezvous). Each is started over SSH with "
            "key-based login (ssh -o BatchMode=yes host 'cd DIR && env … torchrun --nnodes N …'); 'Processes' then "
            "counts per host, and Python, the working directory and the script are paths on the hosts. Stop ends "
            "the run on every host. The hosts must reach this window's collector (bind it beyond loopback).")
        form.addRow("Hosts (SSH)", self.hosts_edit)
        self.ssh_user_edit = QtWidgets.QLineEdit()
        self.ssh_user_edit.setPlaceholderText("empty: ssh's default")
        form.addRow("SSH user", self.ssh_user_edit)
        self.ssh_key_edit = QtWidgets.QLineEdit()
        self.ssh_key_edit.setPlaceholderText("empty: ssh's default keys and agent")
        form.addRow("SSH key", self.ssh_key_edit)
        self.slurm = SlurmFields(form, self._refresh)
        self.base_port_edit = QtWidgets.QLineEdit()
        self.base_port_edit.setPlaceholderText("empty: free ports are picked")
        form.addRow("TF_CONFIG base port", self.base_port_edit)
        self.working_dir_edit = QtWidgets.QLineEdit()
        self.working_dir_edit.setPlaceholderText("empty: the app's working directory")
        form.addRow("Working directory", _with_browse(self.working_dir_edit, self._browse_dir))
        self.env_edit = QtWidgets.QPlainTextEdit()
        self.env_edit.setPlaceholderText("KEY=VALUE, one per line")
        self.env_edit.setMaximumHeight(70)
        form.addRow("Environment", self.env_edit)
        self._form = form

        self.options_box = QtWidgets.QGroupBox("Trainer options (empty = the trainer's default)")
        self._options_form = QtWidgets.QFormLayout(self.options_box)
        self.option_widgets: dict[str, QtWidgets.QWidget] = {}
        for option in OPTION_TABLE:
            widget = _option_widget(option)
            widget.setToolTip(f"{option.flag}: {option.help} ({option.range_text()})")
            self.option_widgets[option.ident] = widget
            self._options_form.addRow(option.flag, widget)
        scroll = QtWidgets.QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.options_box)
        scroll.setMinimumWidth(self.options_box.sizeHint().width() + 24)
        top.addWidget(scroll, 4)

        recent_box = QtWidgets.QGroupBox("Recent")
        recent_layout = QtWidgets.QVBoxLayout(recent_box)
        self.recent_list = QtWidgets.QListWidget()
        self.recent_list.setWordWrap(True)
        for spec in self._recent:
            item = QtWidgets.QListWidgetItem(spec.title())
            item.setToolTip(" ".join(f"--{k} {v}" for k, v in spec.options.items()) or spec.trainer)
            self.recent_list.addItem(item)
        self.recent_list.itemActivated.connect(self._use_recent)
        self.recent_list.itemDoubleClicked.connect(self._use_recent)
        recent_layout.addWidget(self.recent_list)
        top.addWidget(recent_box, 2)

        self.error_label = QtWidgets.QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet(f"color: {theme.ALERT_COLOR};")
        layout.addWidget(self.error_label)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = buttons.button(QtWidgets.QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Launch")
        buttons.accepted.connect(self._accept_if_valid)
        buttons.rejected.connect(self.reject)
        self.sweep_button = QtWidgets.QPushButton("Sweep…")
        self.sweep_button.setAutoDefault(False)
        self.sweep_button.setToolTip(
            "Instead of one launch, a scaling sweep: the reference trainer of each framework chosen, on each rank "
            "count (e.g. 1, 2, 4), one after the other, with this model, data and per-rank batch; then a report of "
            "throughput, scaling efficiency, phase shares and cost per configuration, with a recommendation.\n"
            "Opens the sweep dialog filled from this form.")
        self.sweep_button.clicked.connect(self._request_sweep)
        self.script_button = QtWidgets.QPushButton("Batch script…")
        self.script_button.setAutoDefault(False)
        self.script_button.setToolTip("The Slurm batch script this launch submits; save it to submit it yourself.")
        self.script_button.clicked.connect(self._show_batch_script)
        button_row = QtWidgets.QHBoxLayout()
        button_row.addWidget(self.sweep_button)
        button_row.addWidget(self.script_button)
        button_row.addStretch(1)
        button_row.addWidget(buttons)
        layout.addLayout(button_row)

        for edit in (self.script_edit, self.args_edit, self.python_edit, self.base_port_edit, self.working_dir_edit,
                     self.hosts_edit, self.ssh_user_edit, self.ssh_key_edit):
            edit.textChanged.connect(self._refresh)
        self.env_edit.textChanged.connect(self._refresh)
        self.kind_combo.currentIndexChanged.connect(self._refresh)
        self.target_combo.currentIndexChanged.connect(self._refresh)
        self.reference_radio.toggled.connect(self._refresh)
        self.zero_code_check.toggled.connect(self._refresh)
        self.processes_spin.valueChanged.connect(self._refresh)
        for widget in self.option_widgets.values():
            _connect_changed(widget, self._refresh)
        self.resize(1200, 600)

    # ---- Behaviour ---------------------------------------------------------------------------------------------

    def _kind(self) -> LaunchKind:
        kind: LaunchKind = self.kind_combo.currentData()
        return kind

    def _target(self, kind: LaunchKind) -> tuple[bool, bool]:
        """(over SSH: hosts given for a kind that can use them, on Slurm): where the form's launch runs."""
        on_slurm = self.target_combo.currentIndex() == 1
        return bool(self.hosts_edit.text().strip()) and kind != "tf_mirrored" and not on_slurm, on_slurm

    def _read_form(self) -> tuple[LaunchSpec, list[str]]:
        errors: list[str] = []
        kind = self._kind()
        reference = self.reference_radio.isChecked()
        try:
            args = tuple(shlex.split(self.args_edit.text()))
        except ValueError as error:
            args = ()
            errors.append(f"script arguments: {error} (check the quotes)")
        env, env_errors = parse_env_lines(self.env_edit.toPlainText())
        errors += env_errors
        base_port: int | None = None
        port_text = self.base_port_edit.text().strip()
        over_ssh, on_slurm = self._target(kind)
        if (kind == "tf_multi_worker" or over_ssh or on_slurm) and port_text:
            if port_text.isdigit():
                base_port = int(port_text)
            else:
                errors.append(f"TF_CONFIG base port {port_text!r} is not a whole number; leave it empty for free ports")
        options: dict[str, OptionValue] = {}
        framework = _trainer_framework(kind)
        if reference and framework is not None:
            for option in options_for(framework):
                value = _option_value(self.option_widgets[option.ident])
                if value is not None:
                    options[option.name] = value
        spec = LaunchSpec(
            kind=kind,
            trainer=REFERENCE if reference else self.script_edit.text().strip(),
            script_args=() if reference else args,
            processes=self.processes_spin.value(),
            options=options,
            working_dir=self.working_dir_edit.text().strip() or None,
            env=env,
            python=self.python_edit.text().strip() or sys.executable,
            base_port=base_port,
            zero_code=self.zero_code_check.isChecked(),
            hosts=tuple(self.hosts_edit.text().replace(",", " ").split()) if over_ssh else (),
            ssh_user=self.ssh_user_edit.text().strip() or None,
            ssh_key=self.ssh_key_edit.text().strip() or None,
            restart_max=self.restart_spin.value(),
            slurm=self.slurm.settings() if on_slurm else None,
        )
        return spec, errors

    def _refresh(self) -> None:
        if self._loading:
            return
        kind = self._kind()
        reference = self.reference_radio.isChecked()
        self.reference_radio.setEnabled(kind != "script")
        if kind == "script" and reference:
            self.script_radio.setChecked(True)  # re-enters _refresh with the script choice
            return
        self._form.setRowVisible(self._script_row, not reference)
        self._form.setRowVisible(self.args_edit, not reference)
        self._form.setRowVisible(self.zero_code_check, not reference)
        remote, on_slurm = self._target(kind)
        self._form.setRowVisible(self.hosts_edit, kind != "tf_mirrored" and not on_slurm)
        self._form.setRowVisible(self.ssh_user_edit, remote)
        self._form.setRowVisible(self.ssh_key_edit, remote)
        for row in self.slurm.rows:
            self._form.setRowVisible(row, on_slurm)
        self.script_button.setVisible(on_slurm and self._batch_script is not None)
        self._form.setRowVisible(self.base_port_edit, kind == "tf_multi_worker" or remote or on_slurm)
        port_label = self._form.labelForField(self.base_port_edit)
        if isinstance(port_label, QtWidgets.QLabel):
            port_label.setText("Rendezvous port" if kind == "ddp" else "TF_CONFIG base port")
        elsewhere = remote or on_slurm  # the ports are the hosts' or nodes': fixed defaults, not free ports here
        self.base_port_edit.setPlaceholderText(
            f"empty: {DEFAULT_RENDEZVOUS_PORT if kind == 'ddp' else DEFAULT_WORKER_PORT}" if elsewhere
            else "empty: free ports are picked")
        label = self._form.labelForField(self.processes_spin)
        if isinstance(label, QtWidgets.QLabel):
            label.setText(_PROCESS_LABEL[kind] + (" per host" if remote else " per node" if on_slurm else ""))
        framework = _trainer_framework(kind)
        self.options_box.setVisible(reference and framework is not None)
        if framework is not None:
            applicable = {o.ident for o in options_for(framework)}
            for ident, widget in self.option_widgets.items():
                self._options_form.setRowVisible(widget, ident in applicable)
        errors = self.errors()
        self.error_label.setText("\n".join(f"• {e}" for e in errors))
        self.error_label.setVisible(bool(errors))
        self.ok_button.setEnabled(not errors)
        self.script_button.setEnabled(not errors)

    def _show_batch_script(self) -> None:
        dialog = self.batch_script_dialog()
        if dialog is not None:
            dialog.exec()

    def _accept_if_valid(self) -> None:
        if not self.errors():
            self.accept()

    def _request_sweep(self) -> None:
        values = self.sweep_values()
        self.reject()  # closed first, so the sweep dialog opened by the signal is not behind a modal dialog
        self.sig_sweep_requested.emit(values)

    def _use_recent(self, item: QtWidgets.QListWidgetItem) -> None:
        self.load_spec(self._recent[self.recent_list.row(item)])

    def _browse_script(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Training script", self.working_dir_edit.text(),
                                                        "Python (*.py);;All files (*)")
        if path:
            self.script_edit.setText(path)

    def _browse_dir(self) -> None:
        path = QtWidgets.QFileDialog.getExistingDirectory(self, "Working directory", self.working_dir_edit.text())
        if path:
            self.working_dir_edit.setText(path)


def _trainer_framework(kind: LaunchKind) -> Framework | None:
    """Whose reference trainer (and options) a launch kind uses; None for a script."""
    return "ddp" if kind == "ddp" else "tf" if kind.startswith("tf_") else None


# ---- Option widgets (one per option type) -------------------------------------------------------------------------

def _option_widget(option: OptionSpec) -> QtWidgets.QWidget:
    if option.type == "flag":
        return QtWidgets.QCheckBox(option.help)
    if option.type == "choice":
        combo = QtWidgets.QComboBox()
        if option.default is None:
            combo.addItem("(trainer default)", None)
        for choice in option.choices:
            combo.addItem(choice, choice)
        return combo
    edit = QtWidgets.QLineEdit()
    edit.setPlaceholderText(option.range_text() if option.default is None else f"{option.default}")
    edit.setMinimumWidth(160)
    return edit


def _option_value(widget: QtWidgets.QWidget) -> OptionValue | None:
    if isinstance(widget, QtWidgets.QCheckBox):
        return True if widget.isChecked() else None
    if isinstance(widget, QtWidgets.QComboBox):
        data = widget.currentData()
        return None if data is None else str(data)
    if isinstance(widget, QtWidgets.QLineEdit):
        return widget.text().strip() or None
    return None


def _set_option(widget: QtWidgets.QWidget, value: OptionValue | None) -> None:
    if isinstance(widget, QtWidgets.QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QtWidgets.QComboBox):
        index = widget.findData(None if value is None else str(value))
        widget.setCurrentIndex(max(index, 0))
    elif isinstance(widget, QtWidgets.QLineEdit):
        widget.setText("" if value is None else str(value))


def _connect_changed(widget: QtWidgets.QWidget, slot: Callable[[], None]) -> None:
    if isinstance(widget, QtWidgets.QCheckBox):
        widget.toggled.connect(slot)
    elif isinstance(widget, QtWidgets.QComboBox):
        widget.currentIndexChanged.connect(slot)
    elif isinstance(widget, QtWidgets.QLineEdit):
        widget.textChanged.connect(slot)


def _with_browse(edit: QtWidgets.QLineEdit, browse: Callable[[], None]) -> QtWidgets.QWidget:
    row = QtWidgets.QWidget()
    layout = QtWidgets.QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(edit, 1)
    button = QtWidgets.QPushButton("Browse…")
    button.clicked.connect(browse)
    layout.addWidget(button)
    return row
