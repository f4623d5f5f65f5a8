"""The launch dialog with real widgets over the real core validation."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PySide6 import QtCore, QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.gui.core.launch import KINDS, LaunchSpec
from ringscope.gui.views.qt_launch_dialog import QtLaunchDialog


def make_dialog(qtbot: QtBot, **kwargs: object) -> QtLaunchDialog:
    dialog = QtLaunchDialog(**kwargs)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def choose_kind(dialog: QtLaunchDialog, kind: str) -> None:
    dialog.kind_combo.setCurrentIndex(KINDS.index(kind))  # type: ignore[arg-type]


def test_missing_script_disables_ok_and_says_why_then_a_real_script_is_accepted(qtbot: QtBot, tmp_path: Path) -> None:
    dialog = make_dialog(qtbot)
    choose_kind(dialog, "script")
    assert dialog.script_radio.isChecked() and not dialog.reference_radio.isEnabled()
    qtbot.keyClicks(dialog.script_edit, str(tmp_path / "train.py"))
    assert not dialog.ok_button.isEnabled()
    assert dialog.error_label.isVisible() and "train.py" in dialog.error_label.text()
    assert "not found" in dialog.error_label.text()

    (tmp_path / "train.py").write_text("print('hi')\n")
    dialog.args_edit.setText("--lr 0.1 --name 'my run'")
    dialog.processes_spin.setValue(3)
    dialog.env_edit.setPlainText("A=1\nB=two words")
    dialog.working_dir_edit.setText(str(tmp_path))
    assert dialog.ok_button.isEnabled(), dialog.error_label.text()
    assert not dialog.error_label.isVisible()
    spec = dialog.spec()
    assert spec.kind == "script" and spec.trainer == str(tmp_path / "train.py")
    assert spec.script_args == ("--lr", "0.1", "--name", "my run")
    assert spec.processes == 3 and spec.env == {"A": "1", "B": "two words"} and spec.working_dir == str(tmp_path)
    assert spec.options == {} and spec.python == sys.executable


def test_bad_option_value_is_shown_inline_and_blocks_ok(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    dialog.option_widgets["steps"].clear()  # type: ignore[attr-defined]
    qtbot.keyClicks(dialog.option_widgets["steps"], "12x")
    assert not dialog.ok_button.isEnabled()
    assert "--steps: '12x' is not a whole number" in dialog.error_label.text()
    assert dialog.spec().options["steps"] == "12x"  # the spec carries the text; the core's validate names it
    dialog.option_widgets["steps"].setText("50")  # type: ignore[attr-defined]
    dialog.option_widgets["lr"].setText("-1")  # type: ignore[attr-defined]
    assert "--steps" not in dialog.error_label.text() and "--lr: -1 is out of range" in dialog.error_label.text()
    dialog.option_widgets["lr"].setText("")  # type: ignore[attr-defined]
    assert "--lr" not in dialog.error_label.text() and "lr" not in dialog.spec().options


def test_ok_accepts_only_a_valid_spec(qtbot: QtBot, tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("pass\n")
    dialog = make_dialog(qtbot, initial=LaunchSpec(kind="script", trainer=str(script), processes=1))
    assert dialog.ok_button.isEnabled()
    with qtbot.waitSignal(dialog.accepted, timeout=2000):
        qtbot.mouseClick(dialog.ok_button, QtCore.Qt.MouseButton.LeftButton)
    assert dialog.result() == QtWidgets.QDialog.DialogCode.Accepted


def test_bad_environment_line_and_bad_base_port_are_reported(qtbot: QtBot, tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text("pass\n")
    dialog = make_dialog(qtbot)
    choose_kind(dialog, "tf_multi_worker")
    dialog.script_radio.setChecked(True)
    dialog.script_edit.setText(str(script))
    dialog.env_edit.setPlainText("GOOD=1\nthis is not a pair")
    dialog.base_port_edit.setText("12ab")
    text = dialog.error_label.text()
    assert "environment line 2" in text and "'12ab' is not a whole number" in text
    assert not dialog.ok_button.isEnabled()


def test_options_shown_follow_the_framework(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    form = dialog._options_form
    widgets = dialog.option_widgets
    assert form.isRowVisible(widgets["compression"]) and not form.isRowVisible(widgets["fit"])
    assert form.isRowVisible(widgets["device-ddp"]) and not form.isRowVisible(widgets["device-tf"])
    assert dialog.options_box.isVisible() and not dialog._form.isRowVisible(dialog.base_port_edit)
    choose_kind(dialog, "tf_mirrored")
    assert form.isRowVisible(widgets["fit"]) and not form.isRowVisible(widgets["compression"])
    assert form.isRowVisible(widgets["device-tf"]) and not form.isRowVisible(widgets["device-ddp"])
    assert form.isRowVisible(widgets["steps"])
    label = dialog._form.labelForField(dialog.processes_spin)
    assert isinstance(label, QtWidgets.QLabel) and label.text() == "Devices"
    choose_kind(dialog, "tf_multi_worker")
    assert dialog._form.isRowVisible(dialog.base_port_edit)
    dialog.script_radio.setChecked(True)
    assert not dialog.options_box.isVisible()


def test_reference_ddp_spec_carries_the_form_options(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    widgets = dialog.option_widgets
    widgets["amp"].setChecked(True)  # type: ignore[attr-defined]
    widgets["compression"].setCurrentIndex(widgets["compression"].findData("fp16"))  # type: ignore[attr-defined]
    widgets["slow-rank"].setText("1")  # type: ignore[attr-defined]
    widgets["fit"].setChecked(True)  # type: ignore[attr-defined]  # TF-only: must not leak into a DDP spec
    spec = dialog.spec()
    assert spec.kind == "ddp" and spec.uses_reference and spec.processes == 2
    assert spec.options["amp"] is True and spec.options["compression"] == "fp16"
    assert spec.options["slow-rank"] == "1" and spec.options["dataset"] == "digits" and "fit" not in spec.options
    assert "epochs" not in spec.options  # empty fields mean "the trainer's default": not passed


def test_recent_launch_refills_the_form(qtbot: QtBot, tmp_path: Path) -> None:
    script = tmp_path / "mine.py"
    script.write_text("pass\n")
    old = LaunchSpec(kind="script", trainer=str(script), script_args=("-x", "1"), processes=4, env={"K": "V"})
    dialog = make_dialog(qtbot, recent=[old])
    assert dialog.recent_list.count() == 1 and "mine.py" in dialog.recent_list.item(0).text()
    dialog.recent_list.itemActivated.emit(dialog.recent_list.item(0))
    again = dialog.spec()
    assert again.to_dict() == old.to_dict()
    assert dialog.ok_button.isEnabled()


def test_hosts_make_a_run_over_ssh_and_bad_host_names_are_refused(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    assert not dialog._form.isRowVisible(dialog.ssh_user_edit)  # a local run: no SSH rows
    dialog.hosts_edit.setText("gpu-node-1, gpu-node-2")
    dialog.ssh_user_edit.setText("train")
    dialog.base_port_edit.setText("29500")
    assert dialog._form.isRowVisible(dialog.ssh_user_edit) and dialog._form.isRowVisible(dialog.base_port_edit)
    label = dialog._form.labelForField(dialog.base_port_edit)
    assert isinstance(label, QtWidgets.QLabel) and label.text() == "Rendezvous port"
    spec = dialog.spec()
    assert spec.hosts == ("gpu-node-1", "gpu-node-2") and spec.ssh_user == "train" and spec.base_port == 29500
    assert spec.remote and "gpu-node-1" in spec.title()
    dialog.hosts_edit.setText("gpu-node-1 -oProxyCommand=sh")  # an ssh option smuggled in as a host name
    assert not dialog.ok_button.isEnabled() and "-oProxyCommand=sh" in dialog.error_label.text()
    choose_kind(dialog, "tf_mirrored")  # one process on one machine: no hosts
    assert not dialog._form.isRowVisible(dialog.hosts_edit) and dialog.spec().hosts == ()


def test_the_slurm_target_asks_for_the_allocation_and_shows_the_batch_script_it_submits(qtbot: QtBot,
                                                                                        tmp_path: Path) -> None:
    from ringscope.gui.core.launch.runner import Launcher
    from ringscope.gui.core.launch.slurm_settings import SlurmSettings

    launcher = Launcher("tcp://10.0.0.1:5757")
    dialog = make_dialog(qtbot, launcher_validate=launcher.validate, batch_script=launcher.batch_script)
    assert not dialog._form.isRowVisible(dialog.slurm.nodes_spin) and not dialog.script_button.isVisible()
    dialog.target_combo.setCurrentIndex(1)
    assert dialog._form.isRowVisible(dialog.slurm.nodes_spin) and not dialog._form.isRowVisible(dialog.hosts_edit)
    label = dialog._form.labelForField(dialog.processes_spin)
    assert isinstance(label, QtWidgets.QLabel) and label.text() == "Ranks (processes) per node"
    dialog.slurm.nodes_spin.setValue(4)
    dialog.slurm.partition_edit.setText("gpu")
    dialog.slurm.time_edit.setText("an hour")
    assert not dialog.ok_button.isEnabled() and "time limit 'an hour'" in dialog.error_label.text()
    dialog.slurm.time_edit.setText("4:00:00")
    dialog.slurm.extra_edit.setPlainText("--mem=64G\n\n--qos=high")
    spec = dialog.spec()
    assert spec.slurm == SlurmSettings(nodes=4, partition="gpu", time_limit="4:00:00",
                                       extra=("--mem=64G", "--qos=high"))
    assert spec.hosts == () and "4 Slurm nodes" in spec.title()
    if shutil.which("sbatch"):  # make test installs Slurm's client commands
        assert dialog.ok_button.isEnabled() and dialog.script_button.isVisible(), dialog.error_label.text()
    else:
        assert "sbatch is not installed" in dialog.error_label.text()
    viewer = dialog.batch_script_dialog()
    assert viewer is not None
    qtbot.addWidget(viewer)
    text = viewer.view.toPlainText()
    assert f"#SBATCH --job-name=ringscope-{spec.run_id}" in text and "#SBATCH --nodes=4" in text  # the same run id
    assert "#SBATCH --qos=high" in text and "export RINGSCOPE_ENDPOINT=tcp://10.0.0.1:5757" in text
    assert viewer.save_to(tmp_path / "job.sh") is None and (tmp_path / "job.sh").read_text() == text
    assert viewer.save_to(tmp_path / "missing" / "job.sh") is not None  # a clear sentence, nothing raised
    dialog.load_spec(LaunchSpec())  # a local launch from Recent: back to this machine
    assert dialog.target_combo.currentIndex() == 0 and dialog.spec().slurm is None


# ---- Sweep… -------------------------------------------------------------------------------------------------------


def test_sweep_button_sits_left_of_launch_and_cancel_and_says_what_a_sweep_does(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    box = dialog.findChild(QtWidgets.QDialogButtonBox)
    assert box is not None
    cancel = box.button(QtWidgets.QDialogButtonBox.StandardButton.Cancel)
    sweep_at = dialog.sweep_button.mapTo(dialog, QtCore.QPoint(0, 0))
    for button in (dialog.ok_button, cancel):
        at = button.mapTo(dialog, QtCore.QPoint(0, 0))
        assert sweep_at.x() + dialog.sweep_button.width() <= at.x() and abs(sweep_at.y() - at.y()) <= 2
    assert dialog.sweep_button.text() == "Sweep…" and "scaling sweep" in dialog.sweep_button.toolTip()
    assert not dialog.sweep_button.autoDefault() and dialog.sweep_button.isEnabled()


def test_sweep_button_emits_what_a_sweep_shares_and_closes(qtbot: QtBot) -> None:
    dialog = make_dialog(qtbot)
    widgets = dialog.option_widgets
    for ident, text in (("model-width", "128"), ("model-depth", "3"), ("batch-size", "16"), ("steps", "50")):
        widgets[ident].setText(text)  # type: ignore[attr-defined]
    widgets["dataset"].setCurrentIndex(widgets["dataset"].findData("synthetic"))  # type: ignore[attr-defined]
    widgets["device-ddp"].setCurrentIndex(widgets["device-ddp"].findData("cuda"))  # type: ignore[attr-defined]
    widgets["lr"].setText("0.1")  # type: ignore[attr-defined]  # not a sweep option: not passed
    with qtbot.waitSignal(dialog.sig_sweep_requested, timeout=1000) as asked:
        qtbot.mouseClick(dialog.sweep_button, QtCore.Qt.MouseButton.LeftButton)
    assert asked.args == [{"frameworks": ("ddp",), "model_width": 128, "model_depth": 3, "batch_size": 16,
                           "steps": 50, "dataset": "synthetic", "device": "gpu"}]
    assert not dialog.isVisible() and dialog.result() == QtWidgets.QDialog.DialogCode.Rejected


def test_sweep_values_follow_the_framework_and_the_trainer(qtbot: QtBot, tmp_path: Path) -> None:
    dialog = make_dialog(qtbot)
    choose_kind(dialog, "tf_mirrored")
    dialog.option_widgets["model-width"].setText("")  # type: ignore[attr-defined]  # empty: the trainer's default
    dialog.option_widgets["device-tf"].setCurrentIndex(  # type: ignore[attr-defined]
        dialog.option_widgets["device-tf"].findData("cpu"))  # type: ignore[attr-defined]
    values = dialog.sweep_values()
    assert values["frameworks"] == ("tf-mirrored",) and values["model_width"] == 64 and values["device"] == "cpu"
    dialog.option_widgets["steps"].setText("")  # type: ignore[attr-defined]
    dialog.option_widgets["epochs"].setText("2")  # type: ignore[attr-defined]  # by epochs: the sweep keeps its steps
    dialog.option_widgets["batch-size"].setText("1x")  # type: ignore[attr-defined]  # unparsable: left out
    values = dialog.sweep_values()
    assert "steps" not in values and "batch_size" not in values
    choose_kind(dialog, "tf_multi_worker")
    assert dialog.sweep_values()["frameworks"] == ("tf-multi-worker",)
    dialog.script_radio.setChecked(True)  # the sweep runs reference trainers: a script's options are not theirs
    assert dialog.sweep_values() == {"frameworks": ("tf-multi-worker",)}
    choose_kind(dialog, "script")
    assert dialog.sweep_values() == {}


def test_the_sweep_dialog_takes_over_with_the_launch_values(qtbot: QtBot, tmp_path: Path) -> None:
    from ringscope.gui.core.sweep.request import SweepRequest
    from ringscope.gui.views.qt_sweep import QtSweepDialog

    sweep = QtSweepDialog(initial=SweepRequest(("ddp", "tf-mirrored"), "1,2", str(tmp_path / "out")), cpu_count=2,
                          gpu_count=0)
    qtbot.addWidget(sweep)
    dialog = make_dialog(qtbot)
    choose_kind(dialog, "tf_mirrored")
    dialog.option_widgets["model-depth"].setText("6")  # type: ignore[attr-defined]
    dialog.option_widgets["steps"].setText("75")  # type: ignore[attr-defined]
    dialog.sig_sweep_requested.connect(sweep.prefill)
    dialog.sweep_button.click()
    request = sweep.form.request()
    assert request.frameworks == ("tf-mirrored",) and sweep.form.depth_spin.value() == 6 and request.steps == 75
    assert request.model_width == 64 and request.batch_size == 32 and request.device == "auto"
