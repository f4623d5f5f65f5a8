"""The sweep dialog with real widgets: the CLI's checks inline, a real tiny sweep run from it to the end, and Cancel
stopping a running one with no process left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from PySide6 import QtCore
from pytestqt.qtbot import QtBot

from gui.core.sweep.progress import SESSION_NAME, SweepRequest, default_out_folder
from gui.views.qt_sweep import QtSweepDialog

SWEEP_TIMEOUT_MS = 180_000


@pytest.fixture
def opened() -> list[QtCore.QUrl]:
    """What the dialog asked to open (the report), instead of starting a browser on the test machine."""
    return []


@pytest.fixture
def make_dialog(qtbot: QtBot, opened: list[QtCore.QUrl]) -> Iterator[type[QtSweepDialog]]:
    dialogs: list[QtSweepDialog] = []

    def make(request: SweepRequest) -> QtSweepDialog:
        dialog = QtSweepDialog(initial=request, cpu_count=2, gpu_count=0, open_url=opened.append)
        qtbot.addWidget(dialog)
        dialog.show()
        dialogs.append(dialog)
        return dialog

    yield make  # type: ignore[misc]
    for dialog in dialogs:  # a failed test must not leave a sweep running
        if dialog.process is not None and dialog.process.alive:
            dialog.process.kill()
            dialog.stop_now()


def test_the_form_is_checked_by_the_cli_checks_and_run_waits_for_a_valid_one(make_dialog, tmp_path: Path) -> None:
    dialog = make_dialog(SweepRequest(("ddp",), "1,2", str(tmp_path / "out")))
    assert dialog.errors() == [] and dialog.ok_button.isEnabled() and not dialog.error_label.isVisible()

    dialog.ranks_edit.setText("2")
    assert not dialog.ok_button.isEnabled() and dialog.error_label.isVisible()
    assert "has no 1" in dialog.error_label.text()
    dialog.ranks_edit.setText("1,4")  # 4 ranks on 2 cores
    assert "needs 4 cores" in dialog.error_label.text() and not dialog.ok_button.isEnabled()
    dialog.ranks_edit.setText("1")
    dialog.framework_boxes["ddp"].setChecked(False)
    assert "no framework chosen" in dialog.error_label.text()
    dialog.framework_boxes["ddp"].setChecked(True)
    assert dialog.ok_button.isEnabled(), dialog.error_label.text()

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / SESSION_NAME).write_bytes(b"")
    dialog.revalidate()
    assert "already exists" in dialog.error_label.text() and not dialog.ok_button.isEnabled()
    assert dialog.start() is False and dialog.process is None  # nothing starts from an invalid form


@pytest.mark.slow
def test_a_tiny_sweep_runs_to_the_end_with_progress_and_opens_its_report(
        make_dialog, qtbot: QtBot, opened: list[QtCore.QUrl]) -> None:
    out = Path(default_out_folder())  # under the tests' scratch XDG_DATA_HOME (conftest)
    dialog = make_dialog(SweepRequest(("ddp",), "1", str(out), steps=30))
    progressed: list[str] = []
    dialog.sig_progressed.connect(progressed.append)
    with qtbot.waitSignal(dialog.sig_finished, timeout=SWEEP_TIMEOUT_MS) as finished:
        dialog.ok_button.click()
        assert dialog.running and not dialog.ok_button.isEnabled() and dialog.cancel_button.isEnabled()
        assert not dialog.ranks_edit.isEnabled()  # the form is frozen while it runs
    log = dialog.log_view.toPlainText()
    assert finished.args == [0], log
    assert [(p.number, p.total, p.framework, p.ranks, p.event) for p in dialog.progress] == [
        (1, 1, "ddp", 1, "started"), (1, 1, "ddp", 1, "done")]
    assert progressed[0] == "config 1 of 1: ddp, 1 rank"
    assert dialog.progress_bar.value() == dialog.progress_bar.maximum() == 1
    assert (out / "sweep.html").is_file() and (out / "sweep.csv").is_file() and (out / SESSION_NAME).is_file()
    assert opened == [QtCore.QUrl.fromLocalFile(str(out / "sweep.html"))]
    assert "Sweep finished" in dialog.status_label.text()

    assert dialog.report_button.isEnabled() and dialog.session_button.isEnabled()
    with qtbot.waitSignal(dialog.sig_open_session_requested, timeout=1000) as asked:
        dialog.session_button.click()
    assert asked.args == [str(out / SESSION_NAME)]
    # the folder offered holds a session now: the next sweep is offered a new one
    assert dialog.out_edit.text() != str(out) and Path(dialog.out_edit.text()).parent == out.parent
    assert dialog.ok_button.isEnabled(), dialog.error_label.text()


@pytest.mark.slow
def test_cancel_stops_a_running_sweep_and_leaves_no_process(make_dialog, qtbot: QtBot, tmp_path: Path,
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
    assert [p.event for p in dialog.progress] == ["started", "stopped"], dialog.log_view.toPlainText()
    assert "stopped" in dialog.status_label.text()
    assert opened == []  # a cancelled sweep's report is offered, not opened
    assert not dialog.isVisible()  # it closed itself once the sweep ended


def _alive_children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in process.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def test_the_window_menu_opens_one_sweep_dialog_whose_session_opens_like_file_open(qtbot: QtBot) -> None:
    from gui.core.live.store import LiveStore
    from gui.views.qt_main_window import QtMainWindow

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
