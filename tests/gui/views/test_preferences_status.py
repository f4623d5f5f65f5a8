"""Preferences persist through QSettings (in a temporary folder) and apply to the live store; the status bar
shows drops, gaps and rejections by reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6 import QtCore

from ringscope.agent import wire
from ringscope.agent.schema import Health, Hello
from ringscope.gui.core.ingest.sink import Gap, Rejection
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.views.qt_main_window import QtMainWindow
from ringscope.gui.views.qt_preferences import Preferences, QtPreferencesDialog, load_preferences, save_preferences


@pytest.fixture
def temp_settings(tmp_path):  # type: ignore[no-untyped-def]
    # Never touch the developer's real settings: point QSettings' user scope at a temporary folder (on Unix the
    # native format is an INI file, so setPath redirects QSettings("Ringscope", "Ringscope") too).
    fmt, scope = QtCore.QSettings.Format.NativeFormat, QtCore.QSettings.Scope.UserScope
    QtCore.QSettings.setPath(fmt, scope, str(tmp_path))
    yield tmp_path
    QtCore.QSettings.setPath(fmt, scope, str(Path.home() / ".config"))


def test_preferences_round_trip_and_defaults(temp_settings) -> None:  # type: ignore[no-untyped-def]
    assert load_preferences() == Preferences()
    wanted = Preferences(endpoint="tcp://0.0.0.0:6000", theme="light", price_per_gpu_hour=3.5, lost_timeout_s=9.0)
    save_preferences(wanted)
    assert load_preferences() == wanted
    assert (temp_settings / "Ringscope" / "Ringscope.conf").exists()  # organization "Ringscope", not ~/.config
    settings = QtCore.QSettings("Ringscope", "Ringscope")
    settings.setValue("lost_timeout_s", "not a number")
    settings.setValue("theme", "purple")
    settings.sync()
    loaded = load_preferences()
    assert loaded.lost_timeout_s == Preferences().lost_timeout_s and loaded.theme == "dark"


def test_dialog_edits_a_copy_and_window_applies_it(qtbot, temp_settings) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore(lost_timeout_s=5.0)
    window = QtMainWindow(store, preferences=Preferences())
    window.timer.stop()
    qtbot.addWidget(window)
    dialog = QtPreferencesDialog(window.preferences, window)
    qtbot.addWidget(dialog)
    dialog.timeout.setValue(3.5)
    dialog.price.setValue(4.0)
    dialog.theme.setCurrentText("light")
    edited = dialog.result_preferences()
    assert window.preferences.lost_timeout_s == Preferences().lost_timeout_s == 2.0  # untouched until applied
    window.apply_preferences(edited)
    assert store.lost_timeout_s == 3.5 and window.preferences.price_per_gpu_hour == 4.0
    assert window.action_preferences.shortcut().toString() == "Ctrl+,"
    assert window.action_launch.shortcut().toString() == "Ctrl+L"
    assert window.action_export.shortcut().toString() == "Ctrl+E"
    assert window.action_stop.shortcut().toString() == "Ctrl+."


def test_status_bar_shows_drops_gaps_and_rejections(qtbot) -> None:  # type: ignore[no-untyped-def]
    store = LiveStore()
    now = time.time()
    hello = Hello("run", "a", "h", 1, 0, 0, 1, 0, [0], "simulated", "simulated", None, [], "0.1.0", "1.0", now, 0, now)
    store.on_batch(wire.decode(wire.encode("a", 0, now, [hello, Health(now, 0, 10, 12, 100, 5, 0, 0)])), now)
    store.on_gap(Gap("a", 1, 4, now))
    store.on_rejection(Rejection("version", "schema 2.0", now, 10))
    store.on_rejection(Rejection("malformed", "garbage", now, 3))
    window = QtMainWindow(store, endpoint="tcp://127.0.0.1:5757")
    window.timer.stop()
    qtbot.addWidget(window)
    window.render_frame()
    status = window.status
    assert status.loss.text() == "drops 12 · gaps 3"
    assert status.rejected.text() == "rejected 2"
    assert "version: 1" in status.rejected.toolTip() and "malformed: 1" in status.rejected.toolTip()
    assert "tcp://127.0.0.1:5757" in status.endpoint.text()
    assert status.recording.text() == "not recording"
