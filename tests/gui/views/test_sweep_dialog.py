"""The sweep dialog with real widgets: the CLI's checks inline, a real tiny sweep run from it to the end, Cancel
stopping a running one with no process left behind, and My script giving the command the CLI is typed with."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from PySide6 import QtCore, QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.gui.core.sweep.plan import SESSION_NAME
from ringscope.gui.core.sweep.request import SweepRequest, default_out_folder
from ringscope.gui.views.qt_sweep import QtSweepDialog

SWEEP_TIMEOUT_MS = 180_000
MakeDialog = Callable[[SweepRequest], QtSweepDialog]


@pytest.fixture
def opened() -> list[QtCore.QUrl]:
    """What the dialog asked to open (the report), instead of starting a browser on the test machine."""
    return []


@pytest.fixture
def make_dialog(qtbot: QtBot, opened: list[QtCore.QUrl]) -> Iterator[MakeDialog]:
    dialogs: list[QtSweepDialog] = []

    def make(request: SweepRequest) -> QtSweepDialog:
        dialog = QtSweepDialog(initial=request, cpu_count=2, gpu_count=0, open_url=opened.append)
        qtbot.addWidget(dialog)
        dialog.show()
        dialogs.append(dialog)
        return dialog

    yield make
    for dialog in dialogs:  # a failed test must not leave a sweep running
        if dialog.process is not None and dialog.process.alive:
            dialog.process.kill()
            dialog.stop_now()


def test_the_form_is_checked_by_the_cli_checks_and_run_waits_for_a_valid_one(make_dialog: MakeDialog,
                                                                              tmp_path: Path) -> None:
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", str(tmp_path / "out")))
    assert dialog.form.errors() == [] and dialog.ok_button.isEnabled() and not dialog.form.error_label.isVisible()

    dialog.form.ranks_edit.setText("2")
    assert not dialog.ok_button.isEnabled() and dialog.form.error_label.isVisible()
    assert "has no 1" in dialog.form.error_label.text()
    dialog.form.ranks_edit.setText("1,4")  # 4 ranks on 2 cores
    assert "needs 4 cores" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    dialog.form.ranks_edit.setText("1")
    dialog.form.framework_boxes["ddp"].setChecked(False)
    assert "no framework chosen" in dialog.form.error_label.text()
    dialog.form.framework_boxes["ddp"].setChecked(True)
    assert dialog.ok_button.isEnabled(), dialog.form.error_label.text()

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / SESSION_NAME).write_bytes(b"")
    dialog.form.revalidate()
    assert "already exists" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    assert dialog.start() is False and dialog.process is None  # nothing starts from an invalid form


@pytest.mark.slow
def test_a_tiny_sweep_runs_to_the_end_with_progress_and_opens_its_report(
        make_dialog: MakeDialog, qtbot: QtBot, opened: list[QtCore.QUrl]) -> None:
    out = Path(default_out_folder())  # under the tests' scratch XDG_DATA_HOME (conftest)
    dialog = make_dialog(SweepRequest(("ddp",), "1", str(out), steps=30))
    progressed: list[str] = []
    dialog.sig_progressed.connect(progressed.append)
    with qtbot.waitSignal(dialog.sig_finished, timeout=SWEEP_TIMEOUT_MS) as finished:
        dialog.ok_button.click()
        assert dialog.running and not dialog.ok_button.isEnabled() and dialog.cancel_button.isEnabled()
        assert not dialog.form.ranks_edit.isEnabled()  # the form is frozen while it runs
    log = dialog.progress_view.log_view.toPlainText()
    assert finished.args == [0], log
    assert [(p.number, p.total, p.framework, p.ranks, p.event) for p in dialog.progress] == [
        (1, 1, "ddp", 1, "started"), (1, 1, "ddp", 1, "done")]
    assert progressed[0] == "config 1 of 1: ddp, 1 rank"
    assert dialog.progress_view.progress_bar.value() == dialog.progress_view.progress_bar.maximum() == 1
    assert (out / "sweep.html").is_file() and (out / "sweep.csv").is_file() and (out / SESSION_NAME).is_file()
    assert opened == [QtCore.QUrl.fromLocalFile(str(out / "sweep.html"))]
    assert "Sweep finished" in dialog.progress_view.status_label.text()

    assert dialog.report_button.isEnabled() and dialog.session_button.isEnabled()
    with qtbot.waitSignal(dialog.sig_open_session_requested, timeout=1000) as asked:
        dialog.session_button.click()
    assert asked.args == [str(out / SESSION_NAME)]
    # the folder offered holds a session now: the next sweep is offered a new one
    assert dialog.form.out_edit.text() != str(out) and Path(dialog.form.out_edit.text()).parent == out.parent
    assert dialog.ok_button.isEnabled(), dialog.form.error_label.text()


@pytest.mark.slow
def test_cancel_stops_a_running_sweep_and_leaves_no_process(make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path,
                                                             opened: list[QtCore.QUrl]) -> None:
    out = tmp_path / "sweep"
    dialog = make_dialog(SweepRequest(("ddp",), "1", str(out), steps=1_000_000))
    assert dialog.start()
    assert dialog.process is not None and dialog.process.pid is not None
    sweep = psutil.Process(dialog.process.pid)
    # wait until the configuration runs: the sweep said so and its trainer (torchrun and its rank) is up
    qtbot.waitUntil(lambda: bool(dialog.progress) and len(_alive_children(sweep)) >= 2, timeout=SWEEP_TIMEOUT_MS)
    started = [sweep, *_alive_children(sweep)]

    with qtbot.waitSignal(dialog.sig_finished, timeout=60_000):
        dialog.cancel_button.click()
        assert not dialog.cancel_button.isEnabled()
        dialog.close()  # closing while it stops is refused: the dialog stays until its sweep ended
        assert dialog.isVisible()
    _gone, alive = psutil.wait_procs(started, timeout=10)
    assert alive == [], [p.pid for p in alive]
    assert dialog.cancelled and not dialog.running
    assert [p.event for p in dialog.progress] == ["started", "stopped"], dialog.progress_view.log_view.toPlainText()
    assert "stopped" in dialog.progress_view.status_label.text()
    assert opened == []  # a cancelled sweep's report is offered, not opened
    assert not dialog.isVisible()  # it closed itself once the sweep ended


def _alive_children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in process.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def test_the_window_menu_opens_one_sweep_dialog_whose_session_opens_like_file_open(qtbot: QtBot) -> None:
    from ringscope.gui.core.live.store import LiveStore
    from ringscope.gui.views.qt_main_window import QtMainWindow

    window = QtMainWindow(LiveStore(), endpoint="tcp://127.0.0.1:1")
    qtbot.addWidget(window)
    assert window.action_sweep.isEnabled() and window.action_sweep.text() == "S&weep…"
    window.action_sweep.trigger()
    dialog = window.sweep_dialog
    assert dialog is not None and dialog.isVisible() and dialog.parent() is window
    window.action_sweep.trigger()
    assert window.sweep_dialog is dialog  # one per window: a running sweep is never forgotten
    with qtbot.waitSignal(window.sig_open_requested, timeout=1000) as asked:
        dialog.sig_open_session_requested.emit("/somewhere/sweep.db")
    assert asked.args == ["/somewhere/sweep.db"]
    dialog.sig_progressed.emit("config 1 of 2: ddp, 1 rank")
    assert window.status.currentMessage() == "Sweep: config 1 of 2: ddp, 1 rank"


# ---- The options beyond SweepRequest, and prefill -----------------------------------------------------------------


def _cli_args(argv: list[str]) -> dict[str, object]:
    """``argv`` (after ``python -m ringscope.gui.cli``) parsed by the real ``ringscope`` parser."""
    from ringscope.gui.cli import build_parser

    parsed = vars(build_parser().parse_args(argv))
    return {key: value for key, value in parsed.items() if not key.startswith("_")}  # not the parser itself


def test_every_option_reaches_the_command_as_the_cli_parses_its_flag(make_dialog: MakeDialog,
                                                                     tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", out))
    base = ["sweep", "--frameworks", "ddp", "--ranks", "1,2", "--out", out]
    assert dialog.command()[:4] == [sys.executable, "-m", "ringscope.gui.cli", "sweep"]
    assert _cli_args(dialog.command()[3:]) == _cli_args(base)  # untouched: the CLI's own defaults, no price

    dialog.form.depth_spin.setValue(5)
    dialog.form.price_spin.setValue(3.25)
    dialog.form.timeout_spin.setValue(120)
    dialog.form.delay_edit.setText("ddp:2=40.5,  ddp:1=0")
    assert dialog.form.errors() == [] and dialog.ok_button.isEnabled(), dialog.form.error_label.text()
    typed = [*base, "--model-depth", "5", "--price-per-gpu-hour", "3.25", "--timeout-per-run", "120",
             "--comm-delay-ms-for", "ddp:2=40.5", "--comm-delay-ms-for", "ddp:1=0"]
    from_dialog, from_cli = _cli_args(dialog.command()[3:]), _cli_args(typed)
    assert from_dialog == from_cli
    assert (from_dialog["model_depth"], from_dialog["price_per_gpu_hour"], from_dialog["timeout_per_run"]) == (
        5, 3.25, 120.0)
    assert from_dialog["comm_delay_ms_for"] == [("ddp:2", 40.5), ("ddp:1", 0.0)]
    assert dialog.form.comm_delays()[0] == {"ddp:2": 40.5, "ddp:1": 0.0}


def test_the_new_fields_are_checked_inline_like_the_others(make_dialog: MakeDialog, tmp_path: Path) -> None:
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", str(tmp_path / "out")))
    dialog.form.delay_edit.setText("ddp:2=fast")
    assert not dialog.ok_button.isEnabled() and dialog.form.error_label.isVisible()
    assert "all-reduce delay: expected FRAMEWORK:RANKS=MS" in dialog.form.error_label.text()
    assert "'ddp:2=fast'" in dialog.form.error_label.text()
    dialog.form.delay_edit.setText("ddp:4=40")  # the sweep runs ddp on 1 and 2 ranks only
    assert "the sweep has no configuration ddp:4" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    dialog.form.framework_boxes["tf-mirrored"].setChecked(True)
    dialog.form.delay_edit.setText("tf-mirrored:2=40")
    assert "only the ddp trainer can delay its all-reduce" in dialog.form.error_label.text()
    dialog.form.delay_edit.setText("")
    assert dialog.ok_button.isEnabled() and not dialog.form.error_label.isVisible(), dialog.form.error_label.text()
    assert dialog.form.depth_spin.maximum() == 256 and dialog.form.depth_spin.minimum() == 1  # the trainer's own range
    assert dialog.form.price_spin.text().startswith("the agents' price")  # 0: no --price-per-gpu-hour passed
    form = dialog.form
    assert {form.depth_spin, form.price_spin, form.timeout_spin, form.delay_edit} <= set(form.form_widgets)


def test_prefill_sets_the_fields_it_knows_and_ignores_the_rest(make_dialog: MakeDialog,
                                                               tmp_path: Path) -> None:
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", str(tmp_path / "out")))
    dialog.prefill({"frameworks": ("tf_mirrored",), "model_width": 128, "model_depth": 4, "batch_size": 16,
                    "steps": 50, "dataset": "synthetic", "device": "cuda", "price_per_gpu_hour": 1.5,
                    "timeout_per_run_s": 60, "ranks": (1, 2), "comm_delays": {"ddp:2": 40.0}, "hosts": "node-1"})
    request = dialog.form.request()
    assert request.frameworks == ("tf-mirrored",) and request.ranks == "1,2"
    assert (request.model_width, dialog.form.depth_spin.value(), request.batch_size, request.steps) == (128, 4, 16, 50)
    assert (request.dataset, request.device) == ("synthetic", "gpu")
    assert (dialog.form.price_spin.value(), dialog.form.timeout_spin.value()) == (1.5, 60)
    assert dialog.form.delay_edit.text() == "ddp:2=40"

    dialog.prefill({"frameworks": ("script",), "model_width": "wide", "model_depth": 0, "steps": 2.5,
                    "device": "tpu", "batch_size": True})
    assert dialog.form.request().frameworks == ("tf-mirrored",)  # no known framework: the ticks stay (one at least)
    form = dialog.form
    assert (form.width_spin.value(), form.depth_spin.value(), form.steps_spin.value()) == (128, 4, 50)
    assert (dialog.form.batch_spin.value(), dialog.form.device_combo.currentText()) == (16, "gpu")
    dialog.prefill({"frameworks": "ddp"})
    assert dialog.form.request().frameworks == ("ddp",)
    assert "needs 2 GPUs" in dialog.form.error_label.text()  # prefilled values are checked like typed ones


# ---- My script (ringscope sweep --script PATH --script-args "...") ------------------------------------------------


def _script(tmp_path: Path) -> str:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    return str(script)


def _reference_fields(dialog: QtSweepDialog) -> list[QtWidgets.QWidget]:
    form = dialog.form
    return [form.steps_spin, form.width_spin, form.depth_spin, form.batch_spin, form.dataset_combo, form.delay_edit]


def test_my_script_runs_the_command_the_cli_is_typed_with(make_dialog: MakeDialog, tmp_path: Path) -> None:
    from ringscope.gui.cli import build_parser
    from ringscope.gui.commands.sweep import GIVEN
    from ringscope.gui.core.sweep.plan import script_conflicts

    out, script = str(tmp_path / "out"), _script(tmp_path)
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", out))
    dialog.form.steps_spin.setValue(50)  # typed for the reference trainer: kept in the field, not passed with a script
    dialog.form.delay_edit.setText("ddp:2=40")
    dialog.form.script_radio.setChecked(True)
    dialog.form.script_edit.setText(script)
    dialog.form.script_args_edit.setText('--epochs 1 --name "two words"')
    dialog.form.price_spin.setValue(2.5)
    dialog.form.timeout_spin.setValue(600)
    assert dialog.form.errors() == [] and dialog.ok_button.isEnabled(), dialog.form.error_label.text()

    typed = shlex.split(f"sweep --frameworks ddp --ranks 1,2 --out {shlex.quote(out)} --script {shlex.quote(script)} "
                        "--script-args '--epochs 1 --name \"two words\"' --price-per-gpu-hour 2.5 "
                        "--timeout-per-run 600")
    command = dialog.command()
    assert command[:4] == [sys.executable, "-m", "ringscope.gui.cli", "sweep"]
    assert _cli_args(command[3:]) == _cli_args(typed)
    assert _cli_args(command[3:])["script_args"] == ("--epochs", "1", "--name", "two words")
    # none of the options the CLI refuses with --script: no reference trainer option, no injected delay
    assert script_conflicts(getattr(build_parser().parse_args(command[3:]), GIVEN, [])) == []
    assert not {"--steps", "--model-width", "--model-depth", "--batch-size", "--dataset",
                "--comm-delay-ms-for"} & set(command)

    dialog.form.script_args_edit.setText("--fast")  # one option alone: still the script's, not the CLI's
    assert _cli_args(dialog.command()[3:])["script_args"] == ("--fast",)
    dialog.form.script_args_edit.setText("")
    assert not any(word.startswith("--script-args") for word in dialog.command())
    dialog.form.reference_radio.setChecked(True)  # back to the reference trainer: its fields again, no script
    reference = _cli_args(dialog.command()[3:])
    assert (reference["script"], reference["steps"], reference["comm_delay_ms_for"]) == (None, 50, [("ddp:2", 40.0)])


def test_my_script_disables_the_reference_trainers_fields_and_says_why(make_dialog: MakeDialog,
                                                                      tmp_path: Path) -> None:
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", str(tmp_path / "out")))
    fields = _reference_fields(dialog)
    tips = [field.toolTip() for field in fields]
    assert dialog.form.reference_radio.isChecked() and all(field.isEnabled() for field in fields)
    assert not dialog.form.script_edit.isEnabled() and not dialog.form.script_browse_button.isEnabled()
    assert not dialog.form.script_args_edit.isEnabled()

    dialog.form.script_radio.setChecked(True)
    for field in fields:
        assert not field.isEnabled()
        assert "reference trainers only" in field.toolTip() and "Script arguments" in field.toolTip()
        label = dialog.form.form_layout.labelForField(field)
        assert label is not None and not label.isEnabled() and label.toolTip() == field.toolTip()
    assert dialog.form.script_edit.isEnabled() and dialog.form.script_browse_button.isEnabled()
    assert dialog.form.script_args_edit.isEnabled()
    assert all(w.isEnabled() for w in (dialog.form.ranks_edit, dialog.form.device_combo, dialog.form.price_spin,
                                       dialog.form.timeout_spin, dialog.form.out_edit))
    dialog.form.set_running(True)  # a sweep ran and ended: the form thaws into the same choice
    dialog.form.set_running(False)
    assert not any(field.isEnabled() for field in fields) and dialog.form.script_edit.isEnabled()

    dialog.form.framework_boxes["tf-multi-worker"].setChecked(True)  # a script is written for one framework
    assert dialog.form.request().frameworks == ("tf-multi-worker",)
    dialog.form.reference_radio.setChecked(True)
    assert all(field.isEnabled() for field in fields) and [field.toolTip() for field in fields] == tips
    assert not dialog.form.script_edit.isEnabled()
    dialog.form.framework_boxes["ddp"].setChecked(True)  # the reference trainers: a bake-off of several
    assert dialog.form.request().frameworks == ("ddp", "tf-multi-worker") and dialog.form.request().script is None


def test_my_script_is_refused_as_the_cli_refuses_it(make_dialog: MakeDialog, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from ringscope.gui.cli import build_parser
    from ringscope.gui.commands import sweep as cli

    dialog = make_dialog(SweepRequest(("ddp",), "1", str(tmp_path / "out"), device="cpu"))
    dialog.form.script_radio.setChecked(True)
    assert "no training script chosen" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()

    dialog.form.script_edit.setText(str(tmp_path / "nowhere" / "train.py"))
    shown = dialog.form.errors()
    assert len(shown) == 1 and "does not exist" in shown[0] and dialog.form.error_label.isVisible()
    assert shown[0] in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    # the CLI, given the dialog's own command, refuses it with the very same sentence (before anything starts)
    assert cli.run(build_parser().parse_args(dialog.command()[3:])) == 2
    assert shown[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    dialog.form.script_edit.setText(_script(tmp_path))
    assert dialog.form.errors() == [] and dialog.ok_button.isEnabled(), dialog.form.error_label.text()
    dialog.form.framework_boxes["tf-mirrored"].setChecked(True)  # picks tf-mirrored, on the CPU here
    assert dialog.form.request().frameworks == ("tf-mirrored",)
    assert "--script with tf-mirrored on the CPU" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    dialog.form.reference_radio.setChecked(True)
    dialog.form.framework_boxes["ddp"].setChecked(True)
    dialog.form.script_radio.setChecked(True)  # two ticked from the reference trainer: the list says to keep one
    assert "a script is written for one framework" in dialog.form.error_label.text()
    dialog.form.framework_boxes["tf-mirrored"].setChecked(False)
    dialog.form.script_args_edit.setText('--name "unclosed')
    assert "script arguments: cannot split" in dialog.form.error_label.text() and not dialog.ok_button.isEnabled()
    dialog.form.script_args_edit.setText("--epochs 1")
    assert dialog.form.errors() == [] and dialog.ok_button.isEnabled(), dialog.form.error_label.text()
