"""The time-bucket ring (``ringscope.gui.core.live.time_buckets``), directly and through the store that uses it:
a run longer than the ring is merged, never cut; stamps move exactly where heat columns change; a step older than
the kept history is counted, not added."""

from __future__ import annotations

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.live.time_buckets import MAX_BUCKET_S, TimeBuckets
from tests.gui.core.live.test_store import T0, batch, hello, step


def _steps(store: LiveStore, ranks: list[int], end: float, k: int) -> None:
    step_s = 0.1 + 0.01 * k  # every step differs, so a bucket's means move when it takes one
    records = [Step(r, k, end - step_s, end, step_s, 0.01 * (1 + r % 3), 0.05, 0.04, 0.02 + 0.001 * r, 32)
               for r in ranks]
    store.on_batch(wire.decode(wire.encode("a", k, end, records)), end)


def test_a_run_longer_than_the_ring_is_kept_whole_at_a_coarser_resolution() -> None:
    store = LiveStore(bucket_s=1.0, buckets=60)
    for r in range(2):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), T0)
    steps = 2000  # 200 s of 0.1 s steps: more than 3x the 60 one-second buckets
    for k in range(steps):
        end = T0 + (k + 1) * 0.1
        store.on_batch(batch("a0", [step(0, k, end, comm=0.05)], seq=k + 1), end)
        store.on_batch(batch("a1", [step(1, k, end, comm=0.001)], seq=k + 1), end)
    snap = store.snapshot(now_s=T0 + steps * 0.1)
    assert snap.bucket_s == 4.0  # 1 -> 2 -> 4 s: 200 s fit in 60 buckets
    used = np.isfinite(snap.cluster_phase_s["step"])  # buckets holding steps
    assert used.sum() == 51  # 200 s in 4 s buckets (T0 is not on a bucket edge: one more)
    assert snap.bucket_start_s[used].min() <= T0 + 0.2  # the run's first seconds are still there
    assert snap.bucket_start_s[used].max() >= T0 + 196
    assert snap.counters["late_steps"] == 0
    # nothing was lost in the merges: every steady step is in some bucket, and the shares are unchanged
    heat = snap.heat_comm_exposed_share[:, used]
    assert np.nanmedian(heat[0]) == pytest.approx(0.05 / 0.1, rel=1e-3)
    assert np.nanmedian(heat[1]) == pytest.approx(0.001 / 0.1, rel=1e-3)
    assert np.all(snap.cluster_phase_s["step"][used] == pytest.approx(0.1, rel=1e-4))


def test_bucket_stamps_change_exactly_where_heat_columns_change() -> None:
    store = LiveStore(bucket_s=1.0, buckets=10)
    for k in range(6):
        _steps(store, [0, 1, 2], T0 + k + 0.5, k)
    first = store.snapshot(now_s=T0 + 6)
    _steps(store, [0, 1, 2], T0 + 5.7, 6)  # into the newest bucket only
    second = store.snapshot(now_s=T0 + 6.1)
    changed = second.bucket_stamp != first.bucket_stamp  # a stamp moves when its column does, and only then
    heat_changed = ~np.all((first.heat_data_wait_share == second.heat_data_wait_share)
                           | (np.isnan(first.heat_data_wait_share) & np.isnan(second.heat_data_wait_share)), axis=0)
    assert changed.tolist() == heat_changed.tolist()
    assert changed.sum() == 1 and changed[-1]
    _steps(store, [0, 1, 2], T0 + 2.2, 7)  # a late step into an old bucket still in the history
    third = store.snapshot(now_s=T0 + 6.2)
    old = np.flatnonzero(third.bucket_start_s == T0 + 2)
    assert (third.bucket_stamp != second.bucket_stamp).tolist() == [i in old for i in range(10)]
    used = third.bucket_stamp[third.bucket_stamp > 0]
    assert np.unique(used).size == used.size  # a stamp names one column's contents: never two columns


def test_a_step_older_than_the_ring_is_not_added_and_the_width_stops_at_its_maximum() -> None:
    buckets = TimeBuckets(4, 1.0)
    buckets.grow(2)
    buckets.use(2)

    def load(row: int, end: float) -> int:
        one = step(row, 0, end)
        cols = {name: np.array([np.nan if getattr(one, name) is None else float(getattr(one, name))])
                for name in ("step_s", "data_wait_s", "compute_s", "comm_exposed_s", "samples")}
        return buckets.load(np.array([row]), np.array([end]), cols)

    assert load(0, T0 + 10.0) == 0
    assert load(1, T0 + 10.0 - 9.0) == 1  # before the ring's oldest bucket (first_abs moved on): late, not added
    buckets.widen_to(1e9)  # the ring has steps already: the width stays
    assert buckets.bucket_s == 1.0
    fresh = TimeBuckets(4, 1.0)
    fresh.widen_to(1e9)
    assert fresh.bucket_s == MAX_BUCKET_S
