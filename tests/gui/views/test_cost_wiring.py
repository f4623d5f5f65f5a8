"""The window's cost panel shows whole-session figures from the recording while a real cluster runs."""

from __future__ import annotations

from pathlib import Path

from ringscope.gui.app import build_window
from ringscope.gui.views.qt_preferences import Preferences


def test_cost_panel_fills_from_the_recording_during_a_live_run(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db",
                         preferences=Preferences(endpoint="tcp://127.0.0.1:0", price_per_gpu_hour=3.0),
                         simulate_ranks=2, simulate_kwargs={"steps_per_second": 50, "duration_s": 20,
                                                            "straggler": (1, 5.0), "processes": 0})
    try:
        qtbot.addWidget(parts.window)
        panel = parts.window.cost_panel
        assert panel is not None
        qtbot.waitUntil(lambda: "so far" in panel.total.text(), timeout=15_000)
        assert "$3 per" in panel.price.text()
        stall = panel.waste["allreduce_stall"].text()
        assert stall.startswith("$") and "GPU-hours" in stall, stall  # the simulator reports (simulated) GPUs
    finally:
        parts.close()
