"""Preferences ▸ Metrics endpoint port serves the window's runs to Prometheus, and turning it off stops it."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from ringscope.gui.app import build_window
from ringscope.gui.views.qt_preferences import Preferences
from tests.ports import free_port


def test_the_metrics_switch_starts_and_stops_the_endpoint(qtbot: QtBot, tmp_path: Path) -> None:
    prefs = Preferences()
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db", preferences=prefs)
    qtbot.addWidget(parts.window)
    try:
        port = free_port()
        parts.window.apply_preferences(replace(prefs, metrics_port=port))
        assert f"http://127.0.0.1:{port}/metrics" in parts.window.status.currentMessage()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "ringscope_collector_messages_total" in body
        parts.window.apply_preferences(replace(prefs, metrics_port=0))
        assert parts.window.status.currentMessage() == "metrics endpoint off"
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        parts.close()
