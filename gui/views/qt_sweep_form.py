"""``QtSweepForm``: the sweep dialog's form, every option of ``ringscope sweep``, held as a ``SweepRequest``.

The reference trainers, or *My script* (``--script``, ``--script-args``: the user's own script through the zero-code
launch; the reference trainers' fields are disabled then, as the CLI refuses them). The form is checked on every
change by the CLI's own checks (``ringscope.gui.core.sweep.request.request_errors``); the messages are shown inline
under it and ``sig_checked`` says whether there are any. ``prefill`` takes the values a launch shares with a sweep
(the launch dialog's Sweep… button). Starts nothing: ``QtSweepDialog`` runs the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.launch.options import OPTIONS_BY_KEY
from ringscope.gui.core.sweep.plan import COMM_DELAY_FRAMEWORKS, DATASETS, DEVICES, FRAMEWORK_TITLES, FRAMEWORKS
from ringscope.gui.core.sweep.request import SweepRequest, parse_comm_delays, request_errors
from ringscope.gui.views import theme

MAX_TIMEOUT_S = 7 * 24 * 3600
REFERENCE_ONLY_TIP = ("Configures the reference trainers only; give your script its own settings (steps, batch size, "
                      "model) in Script arguments, e.g. --steps 200 --batch-size 64")


class QtSweepForm(QtWidgets.QWidget):
    """The sweep's fields and their inline errors.

    Args:
        cpu_count / gpu_count: what the checks compare the rank counts with.
    """

    sig_checked = QtCore.Signal(bool)
    """The form was checked again after a change (argument: True when its sweep can start)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None, *, cpu_count: int | None, gpu_count: int) -> None:
        super().__init__(parent)
        self.cpu_count = cpu_count
        self.gpu_count = gpu_count
        self._build()

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

    def comm_delays(self) -> tuple[dict[str, float], list[str]]:
        """The injected all-reduce delays typed (``ddp:2=40, ddp:4=40``), parsed by the CLI's parser, and a message
        for each entry it refuses."""
        return parse_comm_delays(self.delay_edit.text())

    def errors(self) -> list[str]:
        """Every reason the form's sweep cannot start: the CLI's checks, on the whole plan once the rest is valid."""
        request = self.request()
        errors = request_errors(request, cpu_count=self.cpu_count, gpu_count=self.gpu_count)
        return errors + (self.comm_delays()[1] if request.script is None else [])

    def revalidate(self) -> list[str]:
        """Re-check the form: errors shown inline, ``sig_checked`` emitted. Returns the errors."""
        errors = self.errors()
        self.error_label.setText("\n".join(f"• {error}" for error in errors))
        self.error_label.setVisible(bool(errors))
        self.sig_checked.emit(not errors)
        return errors

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
        """
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

    def set_running(self, running: bool) -> None:
        """Freeze the form while its sweep runs; thawed, the fields the chosen training takes are enabled again."""
        for widget in self.form_widgets:
            widget.setEnabled(not running)
        if not running:
            self._apply_training()

    # ---- Layout --------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        outer = QtWidgets.QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.form_layout = form = QtWidgets.QFormLayout()
        self.reference_radio = QtWidgets.QRadioButton("Reference trainer")
        self.reference_radio.setToolTip("the bundled trainer of each framework, on the same model, data and batch")
        self.script_radio = QtWidgets.QRadioButton("My script")
        self.script_radio.setToolTip("your own training script, unmodified, through the zero-code launch (as "
                                     "ringscope run); one framework")
        self._training_group = QtWidgets.QButtonGroup(self)
        form.addRow("Training", row(self.reference_radio, self.script_radio, stretch=True))
        for radio in (self.reference_radio, self.script_radio):
            self._training_group.addButton(radio)
        self.script_radio.toggled.connect(self._training_changed)
        self.script_edit = self._line_edit("path/to/train.py", "your training script (a .py file), run in every "
                                           "configuration (ringscope sweep --script)")
        self.script_browse_button = QtWidgets.QPushButton("Browse…")
        self.script_browse_button.clicked.connect(self._browse_script)
        self._script_row = row(self.script_edit, self.script_browse_button)
        form.addRow("Script", self._script_row)
        self.script_args_edit = self._line_edit("none; e.g. --epochs 1 --batch-size 64", "your script's arguments, the "
                                                "same in every configuration (ringscope sweep --script-args)")
        form.addRow("Script arguments", self.script_args_edit)
        self.framework_boxes: dict[str, QtWidgets.QCheckBox] = {}
        for name in FRAMEWORKS:
            box = self.framework_boxes[name] = QtWidgets.QCheckBox(name)
            box.setToolTip(FRAMEWORK_TITLES[name])
            box.toggled.connect(self._framework_toggled)  # a lambda over self would keep the form alive forever
        form.addRow("Frameworks", row(*self.framework_boxes.values(), stretch=True))
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
        form.addRow("Output folder", row(self.out_edit, self.browse_button))
        self._reference_tips = {widget: widget.toolTip() for widget in (
            self.steps_spin, self.width_spin, self.depth_spin, self.batch_spin, self.dataset_combo, self.delay_edit)}
        self.form_widgets: list[QtWidgets.QWidget] = [
            self.reference_radio, self.script_radio, self.script_edit, self.script_browse_button,
            self.script_args_edit, *self.framework_boxes.values(), self.ranks_edit, *self._number_fields().values(),
            self.dataset_combo, self.device_combo, self.delay_edit, self.out_edit, self.browse_button]
        outer.addLayout(form)
        self.error_label = wrapped_label()
        self.error_label.setStyleSheet(f"color: {theme.ALERT_COLOR};")
        outer.addWidget(self.error_label)

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
            label = self.form_layout.labelForField(widget)
            if label is not None:
                label.setEnabled(script)
        for widget, tip in self._reference_tips.items():
            widget.setEnabled(not script)
            widget.setToolTip(REFERENCE_ONLY_TIP if script else tip)
            label = self.form_layout.labelForField(widget)
            if label is not None:
                label.setEnabled(not script)
                label.setToolTip(REFERENCE_ONLY_TIP if script else "")

    # ---- Slots ---------------------------------------------------------------------------------------------------

    def _training_changed(self) -> None:
        self._apply_training()
        self.revalidate()

    def _framework_toggled(self, checked: bool) -> None:
        name = next((n for n, box in self.framework_boxes.items() if box is self.sender()), None)
        # a script is written for one framework: ticking one picks it
        if checked and name is not None and self.script_radio.isChecked():
            for other, box in self.framework_boxes.items():
                if other != name:
                    box.setChecked(False)
        self.revalidate()

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


def row(*widgets: QtWidgets.QWidget | None, stretch: bool = False) -> QtWidgets.QWidget:
    """``widgets`` side by side (None: the stretch between them; ``stretch``: one after them)."""
    widget_row = QtWidgets.QWidget()
    box = QtWidgets.QHBoxLayout(widget_row)
    box.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        if widget is None:
            box.addStretch(1)
        else:
            box.addWidget(widget, 1 if isinstance(widget, QtWidgets.QLineEdit) else 0)
    if stretch:
        box.addStretch(1)
    return widget_row


def wrapped_label() -> QtWidgets.QLabel:
    """A label for messages: wraps, and its text can be selected (to copy an error)."""
    label = QtWidgets.QLabel()
    label.setWordWrap(True)
    label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _framework_names(value: object) -> list[str]:
    """The sweep framework names in ``value`` (a name or several; launch kinds such as ``tf_mirrored`` accepted)."""
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else []
    words = [str(name).strip().lower().replace("_", "-") for name in names]
    return [word for word in words if word in FRAMEWORKS]


def _delays_text(delays: Mapping[str, float]) -> str:
    """``{"ddp:2": 40.0}`` -> ``ddp:2=40``, as the delay field is typed."""
    return ", ".join(f"{label}={ms:.15g}" for label, ms in delays.items())
