"""The launch dialog's zero-code checkbox, with real widgets over the real core spec."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from ringscope.gui.core.launch import LaunchSpec
from ringscope.gui.views.qt_launch_dialog import QtLaunchDialog


def test_my_script_is_instrumented_automatically_unless_unchecked(qtbot: QtBot, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    dialog = QtLaunchDialog(initial=LaunchSpec(kind="ddp", trainer=str(script)))
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.zero_code_check.isVisible() and dialog.zero_code_check.isChecked()
    assert dialog.spec().zero_code and dialog.spec().injects
    dialog.zero_code_check.setChecked(False)
    assert not dialog.spec().zero_code and not dialog.spec().injects
    assert dialog.ok_button.isEnabled(), dialog.error_label.text()
    dialog.reference_radio.setChecked(True)  # the reference trainers instrument themselves: no choice to make
    assert not dialog.zero_code_check.isVisible()


def test_a_saved_launch_without_zero_code_refills_the_checkbox(qtbot: QtBot, tmp_path: Path) -> None:
    script = tmp_path / "mine.py"
    script.write_text("pass\n")
    dialog = QtLaunchDialog(initial=LaunchSpec(kind="script", trainer=str(script), processes=1, zero_code=False))
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.zero_code_check.isChecked()
    assert dialog.spec().to_dict() == LaunchSpec(kind="script", trainer=str(script), processes=1,
                                                 zero_code=False).to_dict()
