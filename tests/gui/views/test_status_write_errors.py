"""A recorder that cannot write rows is loud in the status bar (red, with the last error); trouble that cost no
row (a recorder process replaced) is said in amber."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.views.qt_status_bar import QtStatusBar


def test_write_errors_turn_the_recording_label_red_with_the_reason(qtbot: QtBot) -> None:
    bar = QtStatusBar()
    qtbot.addWidget(bar)
    snap = LiveStore().snapshot()
    bar.render(snap, "tcp://127.0.0.1:5757", "/data/s.db", 4096)
    assert bar.recording.text() == "recording /data/s.db (4.0 KiB)" and bar.recording.styleSheet() == ""
    bar.render(snap, "tcp://127.0.0.1:5757", "/data/s.db", 4096, write_errors=3,
               last_write_error="database or disk is full")
    assert "3 row(s) NOT WRITTEN" in bar.recording.text() and "#e15759" in bar.recording.styleSheet()
    assert "database or disk is full" in bar.recording.toolTip()


def test_a_recorder_that_recovered_without_losing_a_row_says_so_in_amber(qtbot: QtBot) -> None:
    bar = QtStatusBar()
    qtbot.addWidget(bar)
    note = "the recorder process ended unexpectedly (exit code -9); replaced, nothing lost"
    bar.render(LiveStore().snapshot(), "tcp://127.0.0.1:5757", "/data/s.db", 4096, write_errors=0,
               last_write_error=note)
    assert bar.recording.text() == f"recording /data/s.db (4.0 KiB) · {note}"
    assert "#f28e2b" in bar.recording.styleSheet() and "every row written" in bar.recording.toolTip()
