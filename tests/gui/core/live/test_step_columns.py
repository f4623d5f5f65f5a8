"""The store's steps as columns both ways (``ringscope.gui.core.live.step_columns``, through the store that uses it):
a recording's steps loaded at once leave the state live ingest leaves, and the recent steps export as columns."""

from __future__ import annotations

import math

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, Hello, Step
from ringscope.gui.core.analysis.summary import phase_seconds
from ringscope.gui.core.live.step_columns import PHASE_TOTALS
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.session_data import columns_from_rows
from tests.gui.core.live.test_store import T0, batch, feed_cluster


def _steps(ranks: int, count: int) -> list[Step]:
    rng = np.random.default_rng(7)
    out = []
    for k in range(count):
        for r in range(ranks):
            end = T0 + (k + 1) * 0.1 + rng.uniform(0, 0.01)
            comm = 0.001 if r == 1 else float(rng.uniform(0.02, 0.05))
            out.append(Step(r, k, end - 0.1, end, 0.1, 0.01, 0.05, comm + 0.005, comm, 32, None, None, None, k == 0))
    return out


def test_bulk_load_leaves_the_same_state_as_live_ingest() -> None:
    steps = _steps(4, 900)  # 90 s: more than the 60-bucket ring below, so both paths merge buckets
    hello = Hello("run", "a", "h", 1, 0, 0, 4, 0, [0, 1, 2, 3], "pytorch", "ddp", None, [], "0.1.0", "1.1", T0, 0.0,
                  T0)
    live = LiveStore(buckets=60)
    live.on_batch(wire.Batch("a", 0, T0, (1, 1), [hello]), T0)
    for i in range(0, len(steps), 40):
        live.on_batch(wire.Batch("a", 1 + i, T0, (1, 1), steps[i:i + 40]), steps[i].end_s)
        if i % 400 == 0:
            live.snapshot(now_s=steps[i].end_s)  # frames take the steps handed over so far: merges come in between
    bulk = LiveStore(buckets=60)
    bulk.on_batch(wire.Batch("a", 0, T0, (1, 1), [hello]), T0)
    bulk.load_steps(columns_from_rows("step", [wire.record_values(s) for s in steps]))
    now = T0 + 91.0
    a, b = live.snapshot(now_s=now), bulk.snapshot(now_s=now)
    assert b.bucket_s == a.bucket_s == 2.0
    assert a.steps_total == b.steps_total == len(steps)
    np.testing.assert_array_equal(a.current_step, b.current_step)
    np.testing.assert_allclose(a.recent_comm_exposed_s, b.recent_comm_exposed_s, rtol=1e-6)
    np.testing.assert_allclose(a.step_pct_s, b.step_pct_s, rtol=1e-6)
    used = np.isfinite(a.bucket_start_s)
    np.testing.assert_array_equal(used, np.isfinite(b.bucket_start_s))
    np.testing.assert_allclose(a.heat_comm_exposed_share[:, used], b.heat_comm_exposed_share[:, used], rtol=1e-5)
    np.testing.assert_allclose(a.cluster_phase_s["step"][used], b.cluster_phase_s["step"][used], rtol=1e-5)
    assert a.state == b.state == ("running",) * 4
    assert a.straggler is not None and b.straggler is not None and a.straggler.rank == b.straggler.rank == 1


def test_to_session_data_holds_recent_steps_and_samples() -> None:
    store = LiveStore()
    feed_cluster(store, 3, 10)
    store.on_batch(batch("g", [GpuSample(T0, "h", 0, util_pct=5.0)]), T0)
    data = store.to_session_data()
    assert data.ranks == [0, 1, 2]
    assert len(data.steps["step"]) == 30
    own = data.steps_of(2)
    assert list(own["step"]) == list(range(10))
    assert np.allclose(own["start_s"], own["end_s"] - own["step_s"])
    assert data.gpu["util_pct"][0] == 5.0 and data.gpu["host"][0] == "h"
    assert math.isnan(data.steps["loss"][0])


def test_past_the_budget_each_rank_hands_the_analysis_its_newest_steps() -> None:
    store = LiveStore(recent_steps=32, recent_window=4)
    feed_cluster(store, 4, 50)  # ranks 0-3: 50 steps each, of which the ring keeps the last 32
    late = Hello("run", "late", "h", 1, 9, 0, 5, 0, [9], "pytorch", "ddp", None, [], "0.1.0", "1.1", T0, 0.0, T0)
    store.on_batch(batch("late", [late]), T0)
    store.on_batch(batch("late", [Step(9, k, T0, T0 + 0.1 * (k + 1), 0.1, 0.01, 0.05, 0.03, 0.02, 32, None, None,
                                       None, k == 0) for k in range(3)], seq=1), T0)
    whole = store.to_session_data()
    assert len(whole.steps["step"]) == 4 * 32 + 3  # within the budget: every kept step
    cut = store.to_session_data(budget=5 * 10)  # 5 ranks: 10 steps each at most
    for rank in (0, 1, 2, 3, 9):
        kept = whole.steps_of(rank)
        got = cut.steps_of(rank)
        for name, column in kept.items():
            np.testing.assert_array_equal(got[name], column[-10:], err_msg=f"rank {rank}: {name}")
    assert list(cut.steps_of(0)["step"]) == list(range(40, 50))
    assert list(cut.steps_of(9)["step"]) == [0, 1, 2]  # fewer steps than its share: all of them, no empty slot
    assert len(store.to_session_data(budget=1).steps["step"]) == 4 * 4 + 3  # never below recent_window a rank
    light = store.to_session_data(budget=1, least=2)  # the live analysis's own floor, below recent_window
    assert [list(light.steps_of(rank)["step"]) for rank in (0, 9)] == [[48, 49], [1, 2]]
    assert len(light.steps["step"]) == 5 * 2


def test_steps_of_ranks_beyond_the_cap_are_counted_not_kept_live_and_bulk() -> None:
    steps = [Step(r, k, T0 + k, T0 + k + 0.1, 0.1, 0.01, 0.05, 0.03, 0.02, 32, None, None, None, False)
             for k in range(3) for r in (5, 1, 7, 1, 9)]  # ranks 1 and 5 take the two rows; 7 and 9 find none
    live = LiveStore(max_ranks=2)
    live.on_batch(batch("a", steps[:5]), T0)
    live.snapshot(now_s=T0 + 1)  # between messages, as a frame would
    live.on_batch(batch("a", steps[5:], seq=1), T0 + 3)
    bulk = LiveStore(max_ranks=2)
    bulk.load_steps(columns_from_rows("step", [wire.record_values(s) for s in steps]))
    for store in (live, bulk):
        snap = store.snapshot(now_s=T0 + 4)
        assert sorted(snap.ranks.tolist()) == [1, 5]
        assert snap.counters["records_beyond_rank_cap"] == 2 * 3
        assert snap.steps_total == 3 * 3 and sorted(snap.rank_steps.tolist()) == [3, 6]


def test_running_phase_totals_split_each_step_as_the_analysis_does() -> None:
    rng = np.random.default_rng(7)
    steps = []
    for k in range(400):
        drawn = [float(v) for v in rng.uniform(0.0, 0.05, 3)]
        data: float | None = drawn[0]
        comp: float | None = drawn[1]
        comm: float | None = drawn[2]
        step_s = float(rng.uniform(0.05, 0.2))
        kind = k % 5
        if kind == 1:  # Keras-style: no compute time, the whole step unmeasured
            comp = None
        elif kind == 2:  # a measured step with phases missing: they count 0, ``other`` takes them
            data = comm = None
        elif kind == 3:  # phases that add up to more than the step: ``other`` is 0, never negative
            data = step_s
        elif kind == 4:  # a remainder below 1 µs is rounding, not time
            comp = step_s - drawn[0] - drawn[2] - 4e-7
        steps.append(Step(k % 4, k, T0, T0 + step_s, step_s, data, comp, None, comm, 32, None, None, None, False))
    store = LiveStore(recent_steps=16, recent_window=4)  # most steps leave the rings: the totals keep them
    for i in range(0, len(steps), 30):
        store.on_batch(batch("a", steps[i:i + 30], seq=i), T0)
        if i % 90 == 0:
            store.snapshot(now_s=T0 + i)  # a frame takes what was handed over so far; the rest waits for the next
    totals = store.to_session_data().phase_totals
    columns = columns_from_rows("step", [wire.record_values(one) for one in steps])  # as recorded
    expected = {phase: float(seconds.sum()) for phase, seconds in phase_seconds(columns).items()}
    assert set(expected) == set(PHASE_TOTALS)
    for phase in PHASE_TOTALS:
        assert math.isclose(totals[phase], expected[phase], rel_tol=1e-6, abs_tol=1e-9), phase
    assert totals["unmeasured"] > 0 and totals["other"] > 0
