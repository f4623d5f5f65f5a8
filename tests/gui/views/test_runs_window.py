"""Runs are first-class in the window: real agents -> real collector (ZeroMQ, random port) -> LiveRuns -> runs table,
and real launched processes stopped, finished and killed from the window."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from ringscope import agent
from ringscope.gui.app import WindowParts, build_window
from ringscope.gui.core.analysis.runs import FINISHED, LOST, RUNNING, STOPPED
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.launch import LaunchSpec
from ringscope.gui.core.live.store import STATE_LOST
from ringscope.gui.views import theme
from ringscope.gui.views.qt_preferences import Preferences

WAIT_MS = 20_000
RANK_SCRIPT = """\
import os, signal, sys, time
from ringscope import agent
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
steps = int(os.environ.get("STEPS", "0"))  # 0: until stopped
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
a = agent.start(framework="pytorch", strategy="ddp", rank=rank, world_size=world, sample_devices=False)
print("ready", flush=True)
k = 0
while not stop and (steps == 0 or k < steps):
    t0 = time.time()
    time.sleep(0.04)
    a.step(rank, k, t0, time.time(), data_wait_s=0.004, compute_s=0.025, comm_s=0.01, comm_exposed_s=0.008,
           samples=32)
    k += 1
a.close(finished=not stop)
sys.exit(143 if stop else 0)
"""


@pytest.fixture
def parts(qtbot: QtBot, tmp_path: Path) -> Iterator[WindowParts]:
    built = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "session.db",
                         preferences=Preferences(lost_timeout_s=1.0, price_per_gpu_hour=2.0))
    qtbot.addWidget(built.window)
    built.window.show()
    yield built
    if built.launcher is not None:
        built.launcher.kill()
    built.close()


def _send_steps(agents: list[agent.Agent], ranks_per_agent: list[list[int]], steps: int, step_s: float,
                *, origin: float | None = None) -> float:
    """``steps`` synchronous steps of every rank, ending now (timestamps laid out back from now); returns the
    first step's start."""
    origin = origin if origin is not None else time.time() - steps * step_s
    for k in range(steps):
        start = origin + k * step_s
        for one, ranks in zip(agents, ranks_per_agent, strict=True):
            for rank in ranks:
                one.step(rank, k, start, start + step_s, data_wait_s=0.1 * step_s, compute_s=0.6 * step_s,
                         comm_s=0.3 * step_s, comm_exposed_s=0.2 * step_s, samples=16)
    return origin


def _row(parts: WindowParts, run_id: str):  # type: ignore[no-untyped-def]
    return parts.window.runs_model.run(run_id)


def test_two_runs_get_their_own_rows_cards_and_durations(qtbot: QtBot, parts: WindowParts) -> None:
    win, endpoint = parts.window, parts.collector.endpoint
    ddp = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=4, endpoint=endpoint,
                       run_id="ddp-run", sample_devices=False) for r in range(4)]
    _send_steps(ddp, [[r] for r in range(4)], 40, 0.05)
    for one in ddp:
        one.close()  # goodbye from every rank: finished
    qtbot.waitUntil(lambda: (row := _row(parts, "ddp-run")) is not None and row.state == FINISHED, timeout=WAIT_MS)
    assert win.selected_run_id == "ddp-run"  # the first run is shown as soon as it appears
    qtbot.waitUntil(lambda: win.overview.run.value.text() == "pytorch / ddp", timeout=WAIT_MS)
    assert "finished" in win.overview.run.detail.text()
    assert win.overview.throughput.value.text().startswith("final: ")

    # a MirroredStrategy run starts in the same window: one process, two replicas
    mirrored = agent.start(framework="tensorflow", strategy="MirroredStrategy", rank=0, world_size=2, ranks=[0, 1],
                           endpoint=endpoint, run_id="tf-run", sample_devices=False)
    _send_steps([mirrored], [[0, 1]], 20, 0.1)
    qtbot.waitUntil(lambda: win.selected_run_id == "tf-run", timeout=WAIT_MS)  # a new run is shown at once
    qtbot.waitUntil(lambda: win.overview.run.value.text() == "tensorflow / MirroredStrategy", timeout=WAIT_MS)
    assert "tf-run" in win.windowTitle() and "tf-run" in win.overview.run.detail.text()
    ddp_row, tf_row = _row(parts, "ddp-run"), _row(parts, "tf-run")
    assert (ddp_row.framework, ddp_row.strategy, ddp_row.world_size) == ("pytorch", "ddp", 4)
    assert (tf_row.framework, tf_row.strategy, tf_row.world_size) == ("tensorflow", "MirroredStrategy", 2)
    assert tf_row.state == RUNNING and ddp_row.state == FINISHED
    assert ddp_row.duration_s < 30 and ddp_row.ended_s <= tf_row.started_s + 1  # its own clock, not the session's
    model = win.runs_model
    assert model.rowCount() == 2 and model.text(0, 0) == "tf-run"  # newest first

    # the user picks the older run: every card and chart shows it, and a run appearing now does not take over
    win.runs_table.view.selectRow(model.row_of("ddp-run"))
    assert win.selected_run_id == "ddp-run" and win.store is parts.runs.store("ddp-run")
    qtbot.waitUntil(lambda: win.overview.run.value.text() == "pytorch / ddp", timeout=WAIT_MS)
    assert win.last_snapshot is not None and win.last_snapshot.run_id == "ddp-run"
    late = agent.start(framework="simulated", strategy="simulated", endpoint=endpoint, run_id="late-run",
                       sample_devices=False)
    _send_steps([late], [[0]], 5, 0.1)
    qtbot.waitUntil(lambda: model.row_of("late-run") is not None, timeout=WAIT_MS)
    assert win.selected_run_id == "ddp-run"  # picked by the user a moment ago: kept

    # cost of the running run only grows, also across its end
    costs = []
    for _ in range(3):
        _send_steps([mirrored], [[0, 1]], 3, 0.1, origin=time.time())
        qtbot.wait(300)
        costs.append(model.cost(_row(parts, "tf-run")))
    mirrored.close()
    qtbot.waitUntil(lambda: _row(parts, "tf-run").state == FINISHED, timeout=WAIT_MS)
    qtbot.wait(400)
    costs.append(model.cost(_row(parts, "tf-run")))
    assert costs == sorted(costs) and costs[-1] > 0
    late.close()


def _script(tmp_path: Path, steps: int = 0) -> LaunchSpec:
    path = tmp_path / "rank.py"
    path.write_text(RANK_SCRIPT)
    return LaunchSpec(kind="script", trainer=str(path), processes=2, env={"STEPS": str(steps)}, zero_code=False)


def test_stop_from_the_window_is_stopped_not_lost(qtbot: QtBot, parts: WindowParts, tmp_path: Path) -> None:
    win = parts.window
    win.start_launch(_script(tmp_path))
    run = parts.launcher.runs[-1]
    qtbot.waitUntil(lambda: win.selected_run_id == run.run_id and _row(parts, run.run_id).steps > 20,
                    timeout=WAIT_MS)
    win.action_stop.trigger()  # File > Stop training
    qtbot.waitUntil(lambda: _row(parts, run.run_id).state == STOPPED, timeout=WAIT_MS)
    qtbot.wait(1500)  # longer than the lost timeout: the quiet ranks of a stopped run are not lost
    assert _row(parts, run.run_id).state == STOPPED
    snap = win.render_frame()
    assert STATE_LOST not in snap.state and snap.ended
    win._last_text_render = 0.0
    win.render_frame()
    assert "stopped after" in win.overview.run.detail.text()
    assert theme.ALERT_COLOR not in win.overview.run.value.styleSheet()
    assert parts.runs.priced_until(run.run_id) is not None
    assert win.launch_outcomes[run.run_id].state == STOPPED


def test_natural_end_is_finished_and_a_killed_rank_is_lost(qtbot: QtBot, parts: WindowParts, tmp_path: Path) -> None:
    win = parts.window
    win.start_launch(_script(tmp_path, steps=15))
    done = parts.launcher.runs[-1]
    qtbot.waitUntil(lambda: (row := _row(parts, done.run_id)) is not None and row.state == FINISHED,
                    timeout=WAIT_MS)
    qtbot.waitUntil(lambda: done.run_id in win.launch_outcomes, timeout=WAIT_MS)
    assert win.launch_outcomes[done.run_id].state == FINISHED

    win.start_launch(_script(tmp_path))
    killed = parts.launcher.runs[-1]
    qtbot.waitUntil(lambda: (row := _row(parts, killed.run_id)) is not None and row.steps > 20, timeout=WAIT_MS)
    assert win.selected_run_id == killed.run_id  # launched here: shown
    before = win.runs_model.cost(_row(parts, killed.run_id))
    os.kill(killed.processes[1].pid, signal.SIGKILL)  # one rank dies without a goodbye
    qtbot.waitUntil(lambda: _row(parts, killed.run_id).state == LOST, timeout=WAIT_MS)
    assert win.runs_model.cost(_row(parts, killed.run_id)) >= before
    snap = win.render_frame()
    assert STATE_LOST in snap.state
    win._last_text_render = 0.0
    win.render_frame()
    assert "lost" in win.overview.run.detail.text()
    parts.launcher.kill(killed.run_id)


def test_launch_outcomes_reach_the_recording(qtbot: QtBot, parts: WindowParts, tmp_path: Path) -> None:
    win = parts.window
    win.start_launch(_script(tmp_path, steps=5))
    run = parts.launcher.runs[-1]
    qtbot.waitUntil(lambda: run.run_id in win.launch_outcomes, timeout=WAIT_MS)
    path = parts.recorder.path

    def recorded() -> None:
        # not written yet is a retry (an AssertionError), not a KeyError that ends the wait at its first look
        assert load(path).counters.get("launches", {}).get(run.run_id, {}).get("state") == FINISHED

    qtbot.waitUntil(recorded, timeout=WAIT_MS)  # the file is readable while it is written
