"""The frame codec: every decoded snapshot equals the store's own, field by field, while deltas carry only what
changed (a real LiveStore fed through the real wire format; encoder and decoder as the two processes use them)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ringscope.agent.schema import GpuSample
from ringscope.gui.core.live.gpu_summary import SUMMARY_ABOVE
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.live.time_buckets import MAX_BUCKET_S
from ringscope.gui.core.service.frames import FrameDecoder, FrameEncoder
from tests.gui.core.live.test_store import T0, batch, hello, step


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def assert_same_snapshot(decoded: Snapshot, original: Snapshot) -> None:
    for f in dataclasses.fields(Snapshot):
        if f.name == "gpus":  # everything but the last whole NVML reading, which stays in the ingest process
            assert _same(decoded.gpus, tuple(dataclasses.replace(g, latest=None) for g in original.gpus)), "gpus"
            assert all(g.latest is None for g in decoded.gpus)
            continue
        assert _same(getattr(decoded, f.name), getattr(original, f.name)), f.name


def test_gpu_readings_travel_at_most_every_gpu_every_s_and_then_catch_up() -> None:
    store = LiveStore()
    store.on_batch(batch("a0", [hello("a0", [0]), step(0, 0, T0 + 0.1)]), T0 + 0.1)
    encoder, decoder = FrameEncoder(gpu_every_s=0.25), FrameDecoder()
    utils = []
    for k in range(8):  # a reading every 0.1 s, a frame after each
        now = T0 + 0.2 + 0.1 * k
        store.on_batch(batch("a0", [GpuSample(now, "node0", 0, util_pct=float(k), mem_total_bytes=10)], seq=k + 1),
                       now)
        decoded, _ = _send(encoder, decoder, store.snapshot(now_s=now))
        utils.append(decoded.gpus[0].util_pct[-1])
    assert utils == [0.0, 0.0, 0.0, 3.0, 3.0, 3.0, 6.0, 6.0]  # readings held back at most 0.25 s, never lost
    assert decoded.gpus[0].util_pct.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def _send(encoder: FrameEncoder, decoder: FrameDecoder, snap: Snapshot) -> tuple[Snapshot, dict]:
    frame = encoder.encode(snap, decoder.base)
    return decoder.decode(frame), frame


def test_every_decoded_frame_equals_the_store_snapshot_and_deltas_carry_only_changed_columns() -> None:
    store = LiveStore(bucket_s=0.5, buckets=20)  # a short ring: the run below outgrows it and buckets merge
    ranks = 16
    for r in range(ranks):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r], host=f"node{r // 8}")]), T0)
    encoder, decoder = FrameEncoder(gpu_every_s=0.0), FrameDecoder()
    heat_sent, gpus_sent, merges, widths = [], [], 0, set()
    for k in range(300):
        end = T0 + (k + 1) * 0.1
        for r in range(ranks):
            records = [step(r, k, end, comm=0.001 if r == 3 else 0.04)]
            if k % 5 == r % 5 and r < SUMMARY_ABOVE:  # each GPU sampled every 5th step, a few per frame (few GPUs:
                # a series each; many travel as their summary, test_many_gpus_travel_as_their_summary...)
                records.append(GpuSample(end, f"node{r // 8}", r % 8, util_pct=float(k % 100), mem_used_bytes=k,
                                         mem_total_bytes=1000, rank=r))
            store.on_batch(batch(f"a{r}", records, seq=k + 1), end)
        if k % 3:
            continue
        snap = store.snapshot(now_s=end)
        widths.add(snap.bucket_s)
        decoded, frame = _send(encoder, decoder, snap)
        assert_same_snapshot(decoded, snap)
        assert not decoded.heat_data_wait_share.flags.writeable
        if frame["base"]:
            heat_sent.append(frame["heat_send"].size)
            gpus_sent.append(len(frame["gpus"]["meta"]) if frame["gpus"] else 0)
        else:
            merges += 1
    assert len(widths) >= 3, widths  # the ring merged twice: whole frames then, deltas again after
    assert merges >= 3  # the first frame and one per change of bucket width
    assert np.median(heat_sent) <= 2  # of 20 columns: the one being filled (and the next, at a boundary)
    assert 0 < np.median(gpus_sent) < SUMMARY_ABOVE  # only the GPUs sampled since the last frame


def test_a_delta_against_a_frame_not_held_is_sent_whole_and_a_new_rank_resends_everything() -> None:
    store = LiveStore()
    for r in range(4):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), T0)
        store.on_batch(batch(f"a{r}", [step(r, 0, T0 + 0.1)], seq=1), T0 + 0.1)
    encoder, decoder = FrameEncoder(gpu_every_s=0.0), FrameDecoder()
    _send(encoder, decoder, store.snapshot(now_s=T0 + 0.1))
    decoder.forget()  # the window showed another run meanwhile
    decoded, frame = _send(encoder, decoder, store.snapshot(now_s=T0 + 0.2))
    assert frame["base"] == 0 and frame["gpus"] is None and not decoded.gpus  # no GPU reported: none sent
    store.on_batch(batch("a9", [hello("a9", [9]), step(9, 0, T0 + 0.3)]), T0 + 0.3)
    snap = store.snapshot(now_s=T0 + 0.3)
    decoded, frame = _send(encoder, decoder, snap)
    assert frame["base"] == 0 and list(decoded.ranks) == [0, 1, 2, 3, 9]
    assert_same_snapshot(decoded, snap)


def test_many_gpus_travel_as_their_summary_and_a_series_only_when_its_identity_changes() -> None:
    store = LiveStore()
    store.on_batch(batch("a0", [hello("a0", [0]), step(0, 0, T0 + 0.1)]), T0 + 0.1)
    encoder, decoder = FrameEncoder(gpu_every_s=0.0), FrameDecoder()
    gpus = 64
    sent = []
    for k in range(4):
        now = T0 + 0.5 * (k + 1)
        readings = [GpuSample(now, f"node{g // 8}", g % 8, util_pct=float(g + k), mem_total_bytes=100,
                              name="H100" if k < 3 or g else "H200") for g in range(gpus)]
        store.on_batch(batch("a0", readings, seq=k + 1), now)
        snap = store.snapshot(now_s=now + 2)
        decoded, frame = _send(encoder, decoder, snap)
        assert_same_snapshot(decoded, snap)
        sent.append(0 if frame["gpus"] is None else len(frame["gpus"]["meta"]))
        assert decoded.gpu_summary is not None and decoded.gpu_summary.util_pct[0] == float(k)
    # the first frame names every GPU; new readings alone send none (the summary carries them); a GPU whose name
    # changed travels again
    assert sent == [gpus, 0, 0, 1]
    # a frame between two summaries does not carry it again, and the window keeps the one it holds
    again, frame = _send(encoder, decoder, store.snapshot(now_s=now + 2.1))
    assert frame["same_gpu_summary"] and frame["gpu_summary"] is None
    assert again.gpu_summary is decoded.gpu_summary


def test_columns_without_a_value_do_not_travel() -> None:
    """A run's first steps advance the ring over every column, which empties and stamps them all: only the columns
    that hold a value travel, and the window still gets the store's snapshot exactly."""
    buckets = 40
    store = LiveStore(bucket_s=1.0, buckets=buckets)
    for r in range(8):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), T0)
    encoder, decoder = FrameEncoder(gpu_every_s=0.0), FrameDecoder()
    _send(encoder, decoder, store.snapshot(now_s=T0))  # before any step: no column written
    for r in range(8):
        store.on_batch(batch(f"a{r}", [step(r, 0, T0 + 0.5), step(r, 1, T0 + 1.5)], seq=1), T0 + 1.5)
    snap = store.snapshot(now_s=T0 + 1.6)
    assert np.count_nonzero(snap.bucket_stamp) == buckets  # every column emptied and stamped
    decoded, frame = _send(encoder, decoder, snap)
    assert frame["base"] and frame["heat_send"].size == 2  # the two buckets the steps are in, not all 40
    assert frame["heat"]["heat_comm_exposed_share"].shape == (8, 2)
    assert_same_snapshot(decoded, snap)
    for r in range(8):  # the next frame: the held NaN columns are taken by stamp, the new one travels
        store.on_batch(batch(f"a{r}", [step(r, 2, T0 + 2.5)], seq=2), T0 + 2.5)
    snap = store.snapshot(now_s=T0 + 2.6)
    decoded, frame = _send(encoder, decoder, snap)
    assert frame["heat_send"].size <= 2
    assert_same_snapshot(decoded, snap)


def test_columns_the_ring_empties_again_are_nan_in_the_store_and_in_the_window() -> None:
    """At the widest bucket the ring stops merging and its head passes columns that held steps (the run's oldest
    buckets leave it): they are emptied, NaN for every rank in the store's snapshot and in the decoded frame, with a
    new stamp; the columns never written stay NaN."""
    width = MAX_BUCKET_S
    start = (math.floor(T0 / width) + 1) * width  # on a bucket edge
    store = LiveStore(bucket_s=width, buckets=10)
    for r in range(4):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), start)
    encoder, decoder = FrameEncoder(gpu_every_s=0.0), FrameDecoder()
    for k in range(6):  # buckets 0 .. 5 of the run hold steps
        for r in range(4):
            end = start + (k + 0.5) * width
            store.on_batch(batch(f"a{r}", [step(r, k, end)], seq=k + 1), end)
    before = store.snapshot(now_s=start + 6 * width)
    _send(encoder, decoder, before)
    assert np.isfinite(before.cluster_phase_s["step"]).sum() == 6
    for r in range(4):  # bucket 13: the head passes 6 .. 13, whose columns held buckets 0 .. 3 or nothing
        store.on_batch(batch(f"a{r}", [step(r, 6, start + 13.5 * width)], seq=7), start + 13.5 * width)
    snap = store.snapshot(now_s=start + 13.6 * width)
    assert snap.bucket_s == width and (snap.bucket_start_s - start).tolist() == [b * width for b in range(4, 14)]
    decoded, frame = _send(encoder, decoder, snap)
    assert_same_snapshot(decoded, snap)
    held = np.isfinite(snap.cluster_phase_s["step"])
    assert held.tolist() == [True, True] + [False] * 7 + [True]  # buckets 4, 5 and 13
    for heat in (snap.heat_comm_exposed_share, snap.heat_data_wait_share):
        assert np.isnan(heat[:, ~held]).all() and np.isfinite(heat[:, held]).all()
    assert frame["heat_send"].size == 1  # bucket 13; the emptied columns arrive as "not sent": NaN
    reused = np.isin(before.bucket_start_s, [start + b * width for b in range(4)])
    assert np.isfinite(before.heat_comm_exposed_share[:, reused]).all()  # those columns held values before
