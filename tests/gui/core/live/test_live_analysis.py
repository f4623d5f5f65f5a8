"""Live whole-session figures: a real cluster -> collector -> recorder file -> LiveAnalyzer, no Qt.

The live store keeps only recent steps per rank; cost and waste must come from the whole session: from the recording,
or from the store's running phase totals. These tests check both see every step and price the injected straggler's
wait alike.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from ringscope.agent.simulate import run_cluster
from ringscope.gui.core.analysis.cost import estimate_cost
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.live.live_analysis import LiveAnalyzer
from ringscope.gui.core.live.store import LiveStore


@pytest.fixture
def recorded(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = LiveStore()
    recorder = Recorder(tmp_path / "live.db").start()
    collector = Collector("tcp://127.0.0.1:0", sinks=[store, recorder]).start()
    yield store, recorder, collector
    collector.close()
    recorder.close()


def _wait_for_steps(path: Path, expected: int, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen = len(load(path).steps["step"])
        if seen >= expected:
            break
        time.sleep(0.2)
    return seen


def test_analyzer_reads_the_whole_recording_not_just_the_recent_window(recorded) -> None:  # type: ignore[no-untyped-def]
    store, recorder, collector = recorded
    ranks, steps = 2, 300  # more steps per rank than the live store keeps
    run_cluster(ranks, endpoint=collector.endpoint, steps_per_second=400, steps=steps, straggler=(1, 2.0),
                processes=0)
    assert _wait_for_steps(recorder.path, ranks * steps) == ranks * steps
    recent = len(store.to_session_data().steps["step"])
    analyzer = LiveAnalyzer(lambda: load(recorder.path), lambda: 4.0)
    figures = analyzer.analyze_now()
    assert figures is not None
    assert figures.analysis.steps_total == ranks * steps
    assert recent < ranks * steps, "the store should hold fewer steps than the session for this test to mean much"
    assert figures.cost.price_per_gpu_hour == 4.0 and figures.cost.price_source == "argument"
    # Rank 0 waits ~2 ms per step for rank 1 in AllReduce: that wait is priced as AllReduce stall.
    stall_s = figures.cost.waste_hours["allreduce_stall"] * 3600.0
    assert stall_s >= 0.5 * steps * 0.002, stall_s
    assert figures.cost.cost_total > 0


def test_the_live_store_prices_every_steps_waiting_as_the_recording_does(recorded) -> None:  # type: ignore[no-untyped-def]
    store, recorder, collector = recorded
    ranks, steps = 3, 300  # more steps per rank than the live store keeps (128)
    run_cluster(ranks, endpoint=collector.endpoint, steps_per_second=400, steps=steps, straggler=(1, 2.0),
                processes=0)
    assert _wait_for_steps(recorder.path, ranks * steps) == ranks * steps
    whole = load(recorder.path)
    live = store.to_session_data(64 * ranks, 64 * ranks, 4)  # the live analysis's kind of budget: 64 steps a rank
    assert len(live.steps["step"]) == 64 * ranks < len(whole.steps["step"])
    by_file = estimate_cost(analyze(whole), whole, 2.0, now_s=1e10)
    by_store = estimate_cost(analyze(live), live, 2.0, now_s=1e10)
    assert by_file.waste_hours["allreduce_stall"] > 0
    for cause, hours in by_file.waste_hours.items():
        assert by_store.waste_hours[cause] == pytest.approx(hours, rel=1e-9), cause
    reloaded = LiveStore()  # an ingest process restarted on the recording refills its store: same totals
    reloaded.load_steps(whole.steps)
    totals = reloaded.to_session_data().phase_totals
    assert totals is not None and live.phase_totals is not None
    assert totals == pytest.approx(live.phase_totals, rel=1e-9)
    # the store's columns alone would have priced ~a fifth of the wait (64 of 300 steps a rank)
    cut = replace(live, phase_totals=None)
    assert estimate_cost(analyze(cut), cut, 2.0).waste_hours["allreduce_stall"] < 0.3 * \
        by_file.waste_hours["allreduce_stall"]


def test_analyzer_thread_publishes_figures_and_survives_a_failing_source(tmp_path: Path) -> None:
    calls = {"n": 0}

    def flaky() -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("session file not there yet")
        return LiveStore().to_session_data()

    analyzer = LiveAnalyzer(flaky, lambda: None, min_period_s=0.05).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 10
        while analyzer.latest() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        figures = analyzer.latest()
        assert figures is not None, "the analyzer never recovered from a failing first pass"
        assert figures.analysis.steps_total == 0
        assert calls["n"] >= 2
    finally:
        analyzer.close()
