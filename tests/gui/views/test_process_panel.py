"""The process panel with real widgets over a real Launcher and real processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6 import QtCore, QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.gui.core.launch import Launcher, LaunchSpec
from ringscope.gui.views import theme
from ringscope.gui.views.qt_launch_dialog import QtLaunchDialog
from ringscope.gui.views.qt_process_panel import RECENT_KEY, QtProcessPanel


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    instance = Launcher("tcp://127.0.0.1:5999")
    yield instance
    instance.kill()
    instance.stop(grace_s=0.5)


@pytest.fixture
def panel(qtbot: QtBot, launcher: Launcher, tmp_path: Path) -> QtProcessPanel:
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)
    widget = QtProcessPanel(launcher, settings=settings, grace_s=10.0)
    qtbot.addWidget(widget)
    widget.show()
    return widget


def script(tmp_path: Path, name: str, body: str) -> LaunchSpec:
    path = tmp_path / name
    path.write_text(body)
    return LaunchSpec(kind="script", trainer=str(path), processes=1)


SLEEPER = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM, saving', flush=True), sys.exit(143)))\n"
           "print('ready', flush=True)\n"
           "while True:\n    time.sleep(0.1)\n")


def test_output_of_a_real_process_appears_live(qtbot: QtBot, panel: QtProcessPanel, tmp_path: Path) -> None:
    spec = script(tmp_path, "talk.py", "import time\nfor i in range(5):\n    print('hello', i)\n    time.sleep(0.05)\n")
    with qtbot.waitSignal(panel.sig_run_started, timeout=5000) as started:
        run = panel.start(spec)
    assert started.args == [run.run_id]
    with qtbot.waitSignal(panel.sig_run_finished, timeout=20000) as finished:
        pass
    assert finished.args == [run.run_id, True]
    qtbot.waitUntil(lambda: "hello 4" in panel.output.toPlainText(), timeout=5000)
    assert panel.output.toPlainText().splitlines() == [f"hello {i}" for i in range(5)]
    assert panel.table.item(0, 2).text() == "exited" and panel.table.item(0, 4).text() == "0"
    assert panel.table.item(0, 3).text() == str(run.processes[0].pid)
    assert "exit code 0" in panel.exit_label.text()


def test_stop_button_stops_a_real_process(qtbot: QtBot, panel: QtProcessPanel, tmp_path: Path) -> None:
    run = panel.start(script(tmp_path, "sleep.py", SLEEPER))
    qtbot.waitUntil(lambda: "ready" in panel.output.toPlainText(), timeout=15000)
    assert panel.stop_button.isEnabled() and panel.stop_button.text() == "Stop"
    with qtbot.waitSignal(panel.sig_run_finished, timeout=15000) as finished:
        qtbot.mouseClick(panel.stop_button, QtCore.Qt.MouseButton.LeftButton)
    assert finished.args == [run.run_id, False]
    (process,) = run.processes
    assert process.state == "killed" and process.returncode == 143
    qtbot.waitUntil(lambda: "got SIGTERM, saving" in panel.output.toPlainText(), timeout=5000)
    assert panel.table.item(0, 2).text() == "killed"
    assert not panel.stop_button.isEnabled()


def test_force_stop_kills_a_process_that_ignores_sigterm(qtbot: QtBot, panel: QtProcessPanel, tmp_path: Path) -> None:
    run = panel.start(script(tmp_path, "stubborn.py", (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
        "while True:\n    time.sleep(0.1)\n")))
    qtbot.waitUntil(lambda: "ready" in panel.output.toPlainText(), timeout=15000)
    qtbot.mouseClick(panel.stop_button, QtCore.Qt.MouseButton.LeftButton)
    qtbot.wait(300)
    assert run.alive and panel.stop_button.text() == "Force stop"  # grace is 10 s: still there
    with qtbot.waitSignal(panel.sig_run_finished, timeout=10000):
        qtbot.mouseClick(panel.stop_button, QtCore.Qt.MouseButton.LeftButton)
    assert run.processes[0].state == "killed" and run.processes[0].returncode == -9


def test_crash_shows_exit_code_and_last_lines_in_red(qtbot: QtBot, panel: QtProcessPanel, tmp_path: Path) -> None:
    panel.start(script(tmp_path, "crash.py", (
        "import sys\nprint('loading data')\nprint('Traceback: CUDA out of memory', file=sys.stderr)\nsys.exit(7)\n")))
    qtbot.waitUntil(lambda: panel.table.item(0, 2).text() == "failed", timeout=20000)
    assert panel.exit_label.isVisible()
    text = panel.exit_label.text()
    assert "exit code 7" in text and "loading data" in text and "CUDA out of memory" in text
    assert theme.ALERT_COLOR in panel.exit_label.styleSheet()
    assert panel.table.item(0, 2).foreground().color().name() == theme.ALERT_COLOR.lower()


def test_rerun_starts_a_new_run_and_recent_launches_are_kept(qtbot: QtBot, panel: QtProcessPanel,
                                                             launcher: Launcher, tmp_path: Path) -> None:
    spec = script(tmp_path, "quick.py", "import os\nprint(os.environ['RINGSCOPE_RUN_ID'])\n")
    first = panel.start(spec)
    qtbot.waitUntil(lambda: not first.alive, timeout=20000)
    with qtbot.waitSignal(panel.sig_run_started, timeout=5000) as started:
        qtbot.mouseClick(panel.rerun_button, QtCore.Qt.MouseButton.LeftButton)
    second = launcher.runs[-1]
    assert started.args == [second.run_id] and second.run_id != first.run_id
    assert panel.table.rowCount() == 2
    recent = panel.recent()
    assert len(recent) == 1 and recent[0].to_dict() == spec.to_dict()  # same request once, not twice
    stored = json.loads(str(panel._settings.value(RECENT_KEY)))
    assert stored[0]["trainer"] == spec.trainer


def test_runs_started_on_the_launcher_directly_are_picked_up(qtbot: QtBot, panel: QtProcessPanel,
                                                              launcher: Launcher, tmp_path: Path) -> None:
    # The app starts the demo through the launcher; the panel must show it all the same.
    spec = script(tmp_path, "two.py", "import os\nprint('rank', os.environ['RANK'])\n")
    spec.processes = 2
    with qtbot.waitSignal(panel.sig_run_started, timeout=5000):
        launcher.start(spec)
    assert panel.table.rowCount() == 2
    assert [panel.table.item(r, 1).text() for r in range(2)] == ["rank0", "rank1"]
    panel.select_process(launcher.processes[1])
    qtbot.waitUntil(lambda: "rank 1" in panel.output.toPlainText(), timeout=20000)
    assert "rank 0" not in panel.output.toPlainText()


def test_launch_button_opens_the_dialog_and_starts_what_is_accepted(qtbot: QtBot, panel: QtProcessPanel,
                                                                    launcher: Launcher, tmp_path: Path) -> None:
    target = tmp_path / "mine.py"
    target.write_text("import sys\nprint('args', sys.argv[1:])\n")
    filled: list[bool] = []

    def fill_and_accept() -> None:
        dialog = QtWidgets.QApplication.activeModalWidget()
        assert isinstance(dialog, QtLaunchDialog)
        dialog.kind_combo.setCurrentIndex(dialog.kind_combo.findData("script"))
        dialog.script_edit.setText(str(target))
        dialog.args_edit.setText("--epochs 2")
        dialog.processes_spin.setValue(1)
        filled.append(dialog.ok_button.isEnabled())
        qtbot.mouseClick(dialog.ok_button, QtCore.Qt.MouseButton.LeftButton)

    QtCore.QTimer.singleShot(200, fill_and_accept)
    run = panel.open_launch_dialog()
    assert filled == [True] and run is not None and run.spec.trainer == str(target)
    qtbot.waitUntil(lambda: "args ['--epochs', '2']" in panel.output.toPlainText(), timeout=20000)
    assert panel.recent()[0].script_args == ("--epochs", "2")


def test_a_cancelled_launch_dialog_is_freed_each_time(qtbot: QtBot, panel: QtProcessPanel) -> None:
    opened: list[QtLaunchDialog] = []

    def cancel() -> None:
        dialog = QtWidgets.QApplication.activeModalWidget()
        assert isinstance(dialog, QtLaunchDialog)
        opened.append(dialog)
        dialog.reject()

    for _ in range(3):
        QtCore.QTimer.singleShot(50, cancel)
        assert panel.open_launch_dialog() is None
    assert len(opened) == 3
    qtbot.waitUntil(lambda: not panel.findChildren(QtLaunchDialog), timeout=5000)  # once piled up, one per opening
