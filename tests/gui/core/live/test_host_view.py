"""Ranks grouped by host without Qt: the runs of hosts, one host's frame (the drill-down) and per-host means."""

from __future__ import annotations

import dataclasses

import numpy as np

from ringscope.gui.core.live.host_view import focus, host_means, host_runs, rows_of
from ringscope.gui.core.live.store import LiveStore
from tests.gui.core.live.test_store import T0, batch, hello, step


def _store(ranks: int, per_host: int) -> LiveStore:
    store = LiveStore()
    for r in range(ranks):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r], host=f"node{r // per_host}")]), T0)
    for k in range(5):
        end = T0 + (k + 1) * 0.5
        for r in range(ranks):
            store.on_batch(batch(f"a{r}", [step(r, k, end, comm=0.001 * r, data=None if r == 5 else 0.01)],
                                 seq=k + 1), end)
    return store


def test_runs_of_hosts_and_one_hosts_frame_hold_exactly_its_ranks() -> None:
    snap = _store(24, 8).snapshot(now_s=T0 + 3)
    runs = host_runs(snap.hosts)
    assert runs.names == ("node0", "node1", "node2") and runs.starts.tolist() == [0, 8, 16]
    assert runs.ends.tolist() == [8, 16, 24]
    one = focus(snap, "node1")
    assert one.ranks.tolist() == list(range(8, 16)) and set(one.hosts) == {"node1"} and len(one.state) == 8
    per_rank = {f.name for f in dataclasses.fields(snap)
                if isinstance(getattr(snap, f.name), np.ndarray) and getattr(snap, f.name).shape[:1] == (24,)}
    assert {"ranks", "recent_comm_exposed_s", "heat_data_wait_share", "rank_steps", "drops"} <= per_rank
    for name in per_rank:  # every per-rank array is sliced to the host's rows
        np.testing.assert_array_equal(getattr(one, name), getattr(snap, name)[8:16], err_msg=name)
    for f in dataclasses.fields(snap):  # the rest is the run's, the very same objects
        if f.name not in per_rank | {"hosts", "state"}:
            assert getattr(one, f.name) is getattr(snap, f.name), f.name
    np.testing.assert_array_equal(one.heat_comm_exposed_share, snap.heat_comm_exposed_share[8:16])
    assert one.steps_total == snap.steps_total and one.straggler == snap.straggler
    assert rows_of(snap, "nowhere").size == 0 and focus(snap, "nowhere").ranks.size == 0
    # both timelines draw the same frame: the slice is made once per frame and host, then made anew
    again = focus(snap, "node1")
    assert again is focus(snap, "node1") and again is not one
    later = _store(24, 8).snapshot(now_s=T0 + 4)
    assert focus(later, "node1") is not again and focus(later, "node1").ranks.tolist() == list(range(8, 16))


def test_host_means_skip_missing_values_and_stay_nan_where_a_host_has_none() -> None:
    values = np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, 4.0], [5.0, 6.0], [7.0, np.nan]])
    means = host_means(values, np.array([0, 2]))
    np.testing.assert_array_equal(means[0], [2.0, np.nan])  # host 0: ranks 0-1, nothing in column 1
    np.testing.assert_array_equal(means[1], [6.0, 5.0])  # host 1: ranks 2-4, the missing ones not counted as 0
    assert host_means(values, np.zeros(0, np.int64)).shape == (0, 2)


def test_folding_rows_to_the_pixels_keeps_the_one_unusual_row_that_sampling_drops() -> None:
    from ringscope.gui.core.live.host_view import fold_rows

    image = np.full((512, 6), 80, np.uint8)
    image[97, 2:] = 5  # one host waits far less than the others, from column 2 on
    image[300, 4] = 200  # another, far more, in one column
    image[:, 0] = 255  # a column without data
    image[8:12, 1] = 255  # a block of rows without data (rows 8-11 fold into one drawn row)
    image[13:15, 1] = 255  # and one with some
    folded = fold_rows(image, 170, reference=np.full(6, 80))
    assert folded.shape == (128, 6)  # blocks of 4 rows: at most 170
    assert (folded[:, 0] == 255).all()  # no data stays no data
    assert folded[2, 1] == 255 and folded[3, 1] == 80  # blank only where the whole block is
    assert (folded[24, 2:] == 5).all() and folded[24, 1] == 80  # row 97 is in block 24
    assert folded[75, 4] == 200  # row 300 in block 75
    assert image[::3][:, 2:].min() == 80  # what every 3rd row (sampling) would have shown: neither
    assert fold_rows(image, 600, np.full(6, 80)) is image  # fewer rows than pixels: drawn as they are
