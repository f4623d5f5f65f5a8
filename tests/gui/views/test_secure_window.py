"""A ``--secure`` window: simulated agents with the token reach the charts, a plaintext agent is refused and counted,
the status bar says the channel is encrypted, and the token is shown to the user and given to launched trainings."""

from __future__ import annotations

import pytest
from PySide6 import QtWidgets

from ringscope import agent
from ringscope.agent.keys import ENV_KEY, ENV_KEY_FILE, CollectorKeys
from ringscope.gui.app import build_window
from ringscope.gui.views.qt_preferences import Preferences


def test_secure_window_end_to_end(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    keys = CollectorKeys.generate()
    parts = build_window(bind="tcp://127.0.0.1:0", record=False, keys=keys,
                         preferences=Preferences(endpoint="tcp://127.0.0.1:0"), simulate_ranks=2,
                         simulate_kwargs={"steps_per_second": 50, "duration_s": 20, "processes": 0})
    try:
        window = parts.window
        qtbot.addWidget(window)
        qtbot.waitUntil(lambda: window.last_snapshot is not None and len(window.last_snapshot.ranks) == 2
                        and window.last_snapshot.steps_total > 10, timeout=15_000)
        stranger = agent.start(framework="other", strategy="ddp", endpoint=parts.collector.endpoint, run_id="no-key",
                               sample_devices=False)  # no token: refused at the handshake
        try:
            qtbot.waitUntil(lambda: parts.collector.counters.rejected.get("unauthenticated", 0) > 0, timeout=10_000)
        finally:
            stranger.close(0.2)
        window.render_frame()
        qtbot.waitUntil(lambda: window.status.rejected.text() != "rejected 0", timeout=5_000)
        assert "unauthenticated" in window.status.rejected.toolTip()
        assert window.status.endpoint.text().endswith("encrypted, token required")
        assert parts.collector.counters.agents == 2  # the two simulated ranks' agents; the stranger never got in
        assert window.last_snapshot.framework == "simulated"
        assert window.action_token.isEnabled()
        dialog = window.show_access_token()
        assert dialog is not None
        assert dialog.findChild(QtWidgets.QLineEdit).text() == keys.agent_keys.token
        dialog.close()
        assert parts.launcher.agent_env == {ENV_KEY: keys.agent_keys.token}
    finally:
        parts.close()
