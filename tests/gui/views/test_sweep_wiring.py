"""The launch dialog's Sweep… button reaches the window: the sweep dialog opens, filled from the launch form."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.gui.core.launch import Launcher
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.views.qt_launch_dialog import QtLaunchDialog
from ringscope.gui.views.qt_main_window import QtMainWindow


def test_sweep_from_the_launch_dialog_opens_the_sweep_dialog_filled_from_its_form(qtbot: QtBot) -> None:
    launcher = Launcher("tcp://127.0.0.1:5999")
    window = QtMainWindow(LiveStore(), launcher=launcher)
    qtbot.addWidget(window)
    assert window.process_panel is not None and window.sweep_dialog is None
    launch = QtLaunchDialog(launcher_validate=launcher.validate, parent=window)
    index = launch.kind_combo.findText("MirroredStrategy", QtCore.Qt.MatchFlag.MatchContains)
    assert index >= 0
    launch.kind_combo.setCurrentIndex(index)
    launch.sig_sweep_requested.connect(window.process_panel.sig_sweep_requested)  # as open_launch_dialog does
    button = next(b for b in launch.findChildren(QtWidgets.QPushButton) if b.text() == "Sweep…")
    button.click()
    sweep = window.sweep_dialog
    assert sweep is not None and sweep.isVisible()
    ticked = [name for name, box in sweep.form.framework_boxes.items() if box.isChecked()]
    assert ticked == ["tf-mirrored"], ticked
    window.timer.stop()
    sweep.close()
