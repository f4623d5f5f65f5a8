"""Real agents -> real collector -> live store -> window: telemetry reaches the charts and the ranks table, and a
rank that stops sending is shown as lost within seconds."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ringscope import agent
from ringscope.gui.app import build_window
from ringscope.gui.core.live.store import STATE_LOST, STATE_RUNNING
from ringscope.gui.views.qt_preferences import Preferences


@pytest.fixture
def live(qtbot, tmp_path):  # type: ignore[no-untyped-def]
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "session.db",
                         preferences=Preferences(lost_timeout_s=1.5), simulate_ranks=6,
                         simulate_kwargs={"processes": 0, "steps_per_second": 10, "straggler": (4, 60)})
    qtbot.addWidget(parts.window)
    parts.window.show()
    yield parts
    parts.close()


def test_simulated_cluster_reaches_charts_table_and_status(live, qtbot) -> None:  # type: ignore[no-untyped-def]
    win = live.window

    def enough() -> None:
        snap = win.last_snapshot
        assert snap is not None and len(snap.ranks) == 6
        assert np.isfinite(snap.current_step).all() and snap.current_step.min() >= 15

    qtbot.waitUntil(enough, timeout=30_000)
    snap = win.last_snapshot
    assert snap.framework == "simulated" and set(snap.state) == {STATE_RUNNING}
    assert win.ranks_model.rowCount() == 6
    assert win.ranks_model.data(win.ranks_model.index(0, 1)) == "sim-node-0000"
    drawn = [line for line in win.stall.lines if line.yData is not None and np.isfinite(line.yData).any()]
    assert len(drawn) == 6
    assert np.isfinite(win.breakdown.columns["compute"].opts["height"]).all()
    assert win.overview.straggler.value.text() == "rank 4"
    assert len(win.gpu_panel.util_bars.opts["height"]) == 6  # simulated GPUs, one bar each
    assert "msg/s" in win.status.rate.text() and "session.db" in win.status.recording.text()
    assert not win.grab().isNull()
    qtbot.waitUntil(lambda: live.recorder.rows_written > 0, timeout=10_000)


def test_rank_that_stops_sending_is_shown_lost(live, qtbot) -> None:  # type: ignore[no-untyped-def]
    win = live.window
    qtbot.waitUntil(lambda: win.last_snapshot is not None and len(win.last_snapshot.ranks) == 6, timeout=30_000)
    # one more rank of the same run (an agent of another run id would be a run of its own, in a row of its own)
    extra = agent.start(framework="simulated", strategy="simulated", rank=99, world_size=7,
                        endpoint=live.collector.endpoint, sample_devices=False, run_id=win.last_snapshot.run_id)
    now = time.time()
    for k in range(3):
        extra.step(99, k, now + k * 0.1, now + (k + 1) * 0.1, compute_s=0.08, comm_exposed_s=0.01)
    extra.close(finished=False)  # like a crashed process: no "finished" event

    def row_of_99() -> int:
        snap = win.last_snapshot
        assert snap is not None
        hits = np.flatnonzero(snap.ranks == 99)
        assert hits.size
        return int(hits[0])

    qtbot.waitUntil(lambda: row_of_99() is not None, timeout=15_000)
    started = time.monotonic()
    model = win.ranks_model

    def table_says_lost() -> None:
        assert win.last_snapshot.state[row_of_99()] == STATE_LOST
        assert model.data(model.index(row_of_99(), 2)) == STATE_LOST

    qtbot.waitUntil(table_says_lost, timeout=15_000)
    assert time.monotonic() - started < 10.0  # timeout is 1.5 s; generous for a loaded machine
    others = [s for i, s in enumerate(win.last_snapshot.state) if i != row_of_99()]
    # only the rank that vanished is lost (the run's lifecycle rule then ends the run as lost: a synchronous run
    # cannot go on without a rank, so the others show the run's end, not "lost")
    assert STATE_LOST not in others and len(others) == 6
