"""The heat matrices' frame copies (``ringscope.gui.core.live.heat_pool``, through the store that uses them): recycled
only once no snapshot holds them."""

from __future__ import annotations

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.live.heat_pool import oldest_first
from ringscope.gui.core.live.store import LiveStore

T0 = 1_700_000_000.0


def _steps(store: LiveStore, ranks: list[int], end: float, k: int) -> None:
    step_s = 0.1 + 0.01 * k  # every step differs, so a bucket's means move when it takes one
    records = [Step(r, k, end - step_s, end, step_s, 0.01 * (1 + r % 3), 0.05, 0.04, 0.02 + 0.001 * r, 32)
               for r in ranks]
    store.on_batch(wire.decode(wire.encode("a", k, end, records)), end)


def test_frame_copies_are_never_rewritten_while_a_snapshot_holds_them() -> None:
    store = LiveStore(bucket_s=1.0, buckets=20)
    held = []
    for k in range(30):
        _steps(store, list(range(8)), T0 + 0.3 * k, k)
        snap = store.snapshot(now_s=T0 + 0.3 * k + 0.01)
        held.append((snap, snap.heat_comm_exposed_share.copy(), snap.heat_data_wait_share.copy()))
    for snap, comm, step_s in held:  # 30 live snapshots: more than the recycling pool holds
        np.testing.assert_array_equal(snap.heat_comm_exposed_share, comm)
        np.testing.assert_array_equal(snap.heat_data_wait_share, step_s)
        assert not snap.heat_data_wait_share.flags.writeable


def test_frame_copies_are_recycled_once_released() -> None:
    store = LiveStore(bucket_s=1.0, buckets=20)
    _steps(store, [0, 1], T0, 0)
    snap = store.snapshot(now_s=T0 + 0.1)
    address = snap.heat_data_wait_share.__array_interface__["data"][0]
    expected = snap.heat_data_wait_share.copy()
    del snap
    store._cache = None  # the store's own reuse of an unchanged frame would also hold it
    again = store.snapshot(now_s=T0 + 0.1)
    assert again.heat_data_wait_share.__array_interface__["data"][0] == address  # same buffer, no fresh 1 MB per frame
    np.testing.assert_array_equal(again.heat_data_wait_share, expected)
    assert not again.heat_data_wait_share.flags.writeable


def test_oldest_first_rotates_the_ring_columns() -> None:
    ring = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(oldest_first(ring, 1), [[1, 2, 3, 0], [5, 6, 7, 4]])


def test_ranks_joining_out_of_order_get_the_same_frame_as_ranks_in_order() -> None:
    # thousands of agents joining at once register out of rank order: the frame gathers the rows (and rotates the
    # ring's columns) in one pass; its matrices must equal those of a store whose ranks came in order
    shuffled, ordered = LiveStore(bucket_s=1.0, buckets=20), LiveStore(bucket_s=1.0, buckets=20)
    ranks = [5, 2, 7, 0, 3, 6, 1, 4]
    for k in range(45):  # past 20 buckets: the ring has wrapped, so the copy rotates
        end = T0 + 0.5 * k
        _steps(shuffled, ranks, end, k)
        _steps(ordered, sorted(ranks), end, k)
    a, b = shuffled.snapshot(now_s=T0 + 23), ordered.snapshot(now_s=T0 + 23)
    assert a.ranks.tolist() == b.ranks.tolist() == sorted(ranks)
    for name in ("heat_data_wait_share", "heat_comm_exposed_share"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert np.isfinite(a.heat_comm_exposed_share).sum() > 8 * 10


def test_a_recycled_copy_refilled_column_by_column_equals_a_whole_copy() -> None:
    # Buffers come back at different ages (some snapshots are held longer), ranks join out of order mid-run, steps
    # land in the last three buckets (late ones too, so a refill has several columns to copy), the ring rotates
    # every 4 frames and merges twice: after each frame, the refill must equal a whole copy of the store's heat rows
    # in rank order, oldest bucket first.
    store = LiveStore(bucket_s=1.0, buckets=20)
    held = []
    ranks = [5, 2, 7, 0]
    for k in range(200):
        if k == 60:
            ranks += [6, 1, 4, 3]
        now = T0 + 0.25 * k
        for late in range(3):
            _steps(store, [r for r in ranks if r % 3 == late], now - late, k)
        snap = store.snapshot(now_s=now + 0.01)
        buckets = store._buckets
        order = np.argsort(store._rank_arr[:len(ranks)], kind="stable")
        for name, field in (("data_wait_s", "heat_data_wait_share"), ("comm_exposed_s", "heat_comm_exposed_share")):
            expected = oldest_first(buckets.heat[name][order], buckets.split)
            np.testing.assert_array_equal(getattr(snap, field), expected, err_msg=f"frame {k}: {field}")
        if k % 3 == 0:
            held.append(snap)  # kept: its buffers are not reused while the others' are
        held = held[-3:]
    assert store.bucket_s == 4.0  # the run merged its buckets twice
