"""LiveStore without Qt: ingest real schema records in wire batches and check what a frame would show."""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, GpuSample, GpuStatus, Health, Hello, HostSample, Step
from ringscope.agent.wire import Batch
from ringscope.gui.core.ingest.sink import Gap, Rejection
from ringscope.gui.core.live.store import STATE_FINISHED, STATE_LOST, STATE_RUNNING, LiveStore, find_live_straggler

T0 = 1_700_000_000.0


def hello(agent_id: str, ranks: list[int], host: str = "node0", strategy: str = "ddp") -> Hello:
    return Hello("run", agent_id, host, 1, ranks[0], 0, 4, 0, ranks, "simulated", strategy, None, [], "0.1.0",
                 "1.0", T0, 0.0, T0)


def step(rank: int, k: int, end: float, *, data: float = 0.01, comp: float = 0.04, comm: float = 0.02,
         samples: int | None = 32, first: bool = False) -> Step:
    step_s = 0.1
    return Step(rank, k, end - step_s, end, step_s, data, comp, comm + 0.01, comm, samples, None, None, None, first)


def batch(agent_id: str, records: list, seq: int = 0) -> Batch:
    # through the real wire format, so the store sees exactly what the collector hands it
    return wire.decode(wire.encode(agent_id, seq, T0, records))


def feed_cluster(store: LiveStore, ranks: int, steps: int, *, slow: int | None = None, start: float = T0) -> None:
    for r in range(ranks):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), start)
    for k in range(steps):
        end = start + (k + 1) * 0.1
        for r in range(ranks):
            comm = 0.001 if r == slow else 0.04
            store.on_batch(batch(f"a{r}", [step(r, k, end, comm=comm)], seq=k + 1), end)


def test_empty_store_snapshot_is_empty_not_zero() -> None:
    snap = LiveStore().snapshot()
    assert snap.ranks.size == 0
    assert math.isnan(snap.idle_share) and snap.straggler is None and math.isnan(snap.steps_per_s)
    assert not snap.no_gpu  # nothing reported yet: we do not claim "no GPU"


def test_steps_reach_table_heat_and_breakdown() -> None:
    store = LiveStore(bucket_s=1.0, buckets=30)
    feed_cluster(store, 4, 30)
    snap = store.snapshot(now_s=T0 + 3.05)
    assert list(snap.ranks) == [0, 1, 2, 3]
    assert snap.state == (STATE_RUNNING,) * 4
    assert list(snap.current_step) == [29] * 4
    assert np.allclose(snap.recent_step_s, 0.1)
    assert np.allclose(snap.recent_comm_exposed_s, 0.04)
    assert np.all(np.diff(snap.bucket_start_s) == 1.0)  # one time axis, oldest first
    used = ~np.isnan(snap.heat_data_wait_share[0])
    assert used.sum() == 4 and used[-1]  # steps ended in 3 full seconds + one partial, the newest last
    assert np.all(np.isnan(snap.heat_data_wait_share[:, ~used]))  # empty buckets are NaN, never 0
    assert np.allclose(snap.heat_comm_exposed_share[:, used], 0.4, atol=1e-4)
    assert np.allclose(snap.cluster_phase_s["compute"][used], 0.04, atol=1e-6)
    assert np.allclose(snap.cluster_phase_s["other"][used], 0.1 - 0.01 - 0.04 - 0.04, atol=1e-6)
    assert snap.steps_per_s == pytest.approx(4 * 10, rel=0.1)  # 4 ranks x 10 steps/s
    assert snap.idle_share == pytest.approx(0.6, abs=1e-3)
    assert snap.idle_cause == "comm_exposed"


def test_throughput_is_unknown_in_the_first_second_and_zero_once_the_steps_stop() -> None:
    store = LiveStore(bucket_s=1.0, buckets=30)
    for r in range(4):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), T0)
    for k in range(3):  # the run's first steps all end in its first, still incomplete second
        for r in range(4):
            store.on_batch(batch(f"a{r}", [step(r, k, T0 + 0.2 + 0.1 * k)], seq=k + 1), T0 + 0.5)
    first = store.snapshot(now_s=T0 + 0.6)
    # 12 steps came, but no complete second holds any: not measured yet ("measuring"), never "0 steps/s"
    assert first.steps_total == 12 and math.isnan(first.steps_per_s) and math.isnan(first.samples_per_s)
    assert store.snapshot(now_s=T0 + 1.5).steps_per_s == pytest.approx(12.0)  # one complete second: 12 steps in it
    stopped = store.snapshot(now_s=T0 + 8.0)  # nothing for 7 s: the last 5 s had 0 steps
    assert stopped.steps_per_s == 0.0


def test_straggler_is_the_rank_that_waits_least_in_allreduce() -> None:
    store = LiveStore()
    feed_cluster(store, 8, 25, slow=5)
    snap = store.snapshot(now_s=T0 + 3)
    assert snap.straggler is not None and snap.straggler.rank == 5
    assert snap.ranks[snap.straggler_row()] == 5
    assert "rank 5" in snap.straggler.reason


def test_a_lost_rank_is_not_the_straggler() -> None:
    store = LiveStore(lost_timeout_s=1.0)
    feed_cluster(store, 4, 25, slow=2)
    assert store.snapshot(now_s=T0 + 2.6).straggler.rank == 2  # type: ignore[union-attr]
    for r in (0, 1, 3):  # everybody but the slow rank keeps sending
        store.on_batch(batch(f"a{r}", [step(r, 99, T0 + 4.0)], seq=99), T0 + 4.0)
    snap = store.snapshot(now_s=T0 + 4.1)
    assert snap.state[2] == STATE_LOST and (snap.straggler is None or snap.straggler.rank != 2)


def test_no_straggler_in_a_balanced_cluster() -> None:
    ranks = np.arange(8)
    step_s = np.full(8, 0.1)
    comm = 0.04 + np.linspace(0, 0.002, 8)  # jitter far below 5 % of a step
    assert find_live_straggler(ranks, step_s, comm, np.full(8, 0.01)) is None


def test_lost_finished_and_restarted_ranks() -> None:
    store = LiveStore(lost_timeout_s=2.0)
    feed_cluster(store, 3, 5)
    last = T0 + 0.5
    store.on_batch(batch("a1", [Event(last, EventKind.FINISHED, 1)], seq=9), last)
    snap = store.snapshot(now_s=last + 1.0)
    assert snap.state == (STATE_RUNNING, STATE_FINISHED, STATE_RUNNING)
    store.on_batch(batch("a0", [step(0, 5, last + 2.5)], seq=10), last + 2.5)
    snap = store.snapshot(now_s=last + 3.0)
    assert snap.state == (STATE_RUNNING, STATE_FINISHED, STATE_LOST)
    # rank 1 restarts under a new agent id: running again, same row
    store.on_batch(batch("a1-new", [hello("a1-new", [1]), step(1, 0, last + 3.0)]), last + 3.0)
    snap = store.snapshot(now_s=last + 3.1)
    assert snap.state[1] == STATE_RUNNING and list(snap.ranks) == [0, 1, 2]


def test_mirrored_agent_covers_many_ranks_and_late_ranks_grow_the_store() -> None:
    store = LiveStore()
    store.on_batch(batch("m", [hello("m", list(range(8)), strategy="mirrored")]), T0)
    store.on_batch(batch("m", [step(r, 0, T0 + 0.1) for r in range(8)], seq=1), T0 + 0.1)
    store.on_batch(batch("m", [Health(T0, 0, 100, 7, 10, 1, 0, 1)], seq=2), T0 + 0.2)
    store.on_gap(Gap("m", 3, 6, T0))
    for r in range(100, 1124):  # 1024 ranks appearing late, far past the initial capacity
        store.on_batch(batch(f"x{r}", [step(r, 0, T0 + 0.2)]), T0 + 0.2)
    snap = store.snapshot(now_s=T0 + 0.3)
    assert snap.ranks.size == 8 + 1024
    assert list(snap.drops[:8]) == [7] * 8 and list(snap.gaps[:8]) == [3] * 8
    assert snap.hosts[0] == "node0" and snap.hosts[-1] == "?"  # no hello from x*: host unknown, not invented
    assert snap.world_size >= 1032


def _vm_rss_mb() -> float:
    for line in open("/proc/self/status").read().splitlines():  # noqa: SIM115 (one read)
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_run_announcing_its_size_gets_room_at_once_that_costs_memory_only_as_ranks_come() -> None:
    def fed(world_size: int) -> LiveStore:
        store = LiveStore(buckets=8, bucket_s=0.1)  # 0.8 s of buckets: the run below merges them twice
        for r in range(3):
            store.on_batch(batch(f"a{r}", [dataclasses.replace(hello(f"a{r}", [r]), world_size=world_size)]), T0)
        for k in range(30):
            end = T0 + (k + 1) * 0.1
            ranks = range(3) if k < 20 else range(6)  # three ranks join after the last merge (at step 16)
            for r in ranks:
                store.on_batch(batch(f"a{r}", [step(r, k, end, comm=0.001 * r)], seq=k + 1), end)
            if k == 19:
                store.snapshot(now_s=end)  # the columns so far are computed: the late ranks' rows must show NaN
        return store

    plain, announced = fed(world_size=4).snapshot(now_s=T0 + 4), fed(world_size=6_000).snapshot(now_s=T0 + 4)
    for name in ("ranks", "heat_data_wait_share", "heat_comm_exposed_share", "current_step", "rank_steps",
                 "bucket_start_s"):
        np.testing.assert_array_equal(getattr(announced, name), getattr(plain, name), err_msg=name)
    assert np.isnan(announced.heat_comm_exposed_share[3:, 0]).all()  # late ranks: nothing measured before they came
    assert plain.bucket_s == announced.bucket_s == 0.4

    before = _vm_rss_mb()
    huge = LiveStore()
    huge.on_batch(batch("a0", [dataclasses.replace(hello("a0", [0]), world_size=2**31 - 1)]), T0)
    assert huge.snapshot(now_s=T0).ranks.tolist() == [0]
    assert huge._cap == huge._max_ranks  # a bogus world size reserves the store's rank cap, no more
    grew = _vm_rss_mb() - before
    assert grew < 40, f"reserving 8 192 rows (~235 MB) took {grew:.0f} MB of memory before any rank used them"


def test_the_first_steps_of_thousands_of_ranks_map_only_the_buckets_they_write() -> None:
    # A join storm: 2 048 ranks announce themselves, then take two steps each. Their time-bucket sums over a
    # 4 000-bucket ring are ~260 MB; only the two buckets written may cost memory. Before the sums were bucket-major
    # and the first advance skipped never-used buckets, the first step mapped all of them (+250 MB; on this
    # project's VMs ~6 ms a MB, on the collector thread: most of the 8 192-rank join storm's backlog).
    store = LiveStore(buckets=4000)
    ranks = 2048
    for r in range(ranks):
        store.on_batch(batch(f"a{r}", [dataclasses.replace(hello(f"a{r}", [r]), world_size=ranks)]), T0)
    before = _vm_rss_mb()
    for k in range(2):
        for r in range(ranks):
            store.on_batch(batch(f"a{r}", [step(r, k, T0 + 1.0 + k)], seq=k + 1), T0 + 1.0 + k)
    grew = _vm_rss_mb() - before
    snap = store.snapshot(now_s=T0 + 3.0)
    assert snap.rank_steps.tolist() == [2] * ranks and snap.steps_total == 2 * ranks
    assert np.isfinite(snap.heat_comm_exposed_share[:, -2:]).all()  # the two buckets written, for every rank
    assert grew < 60, f"2 048 ranks' first two steps mapped {grew:.0f} MB"


def test_gpu_host_and_no_gpu_state() -> None:
    store = LiveStore()
    store.on_batch(batch("a", [HostSample(T0, "cpu-box", 12.0, 1, 2, None, None, 0, GpuStatus.NO_GPU, "no lib")]), T0)
    assert store.snapshot(now_s=T0).no_gpu
    store.on_batch(batch("b", [GpuSample(T0, "gpu-box", 0, util_pct=55.0, mem_used_bytes=10, mem_total_bytes=20),
                               GpuSample(T0 + 1, "gpu-box", 0, util_pct=None)]), T0 + 1)
    snap = store.snapshot(now_s=T0 + 1)
    assert not snap.no_gpu
    (gpu,) = snap.gpus
    assert gpu.util_pct[0] == 55.0 and math.isnan(gpu.util_pct[1])  # unsupported reading stays missing
    assert snap.host_states[0].cpu_pct[0] == 12.0


def test_rejections_gaps_and_rates_are_counted() -> None:
    store = LiveStore()
    store.on_rejection(Rejection("version", "schema 2.0", T0, 10))
    store.on_rejection(Rejection("version", "schema 2.0", T0, 10))
    store.on_rejection(Rejection("malformed", "garbage", T0, 3))
    for i in range(50):
        store.on_batch(batch("a", [], seq=i), T0 + 1 + i * 0.05)
    snap = store.snapshot(now_s=T0 + 4.0)
    assert snap.counters["rejected"] == {"version": 2, "malformed": 1}
    assert snap.messages_per_s == pytest.approx(50 / 3)  # all 50 in seconds 1..3, the complete ones before 4


def test_snapshot_is_immutable_and_cached_until_a_change() -> None:
    store = LiveStore()
    feed_cluster(store, 2, 3)
    a = store.snapshot(now_s=T0 + 1)
    assert store.snapshot(now_s=T0 + 1.05) is a
    with pytest.raises(ValueError):
        a.heat_data_wait_share[0, 0] = 1.0
    store.on_batch(batch("a0", [step(0, 9, T0 + 1)], seq=99), T0 + 1)
    assert store.snapshot(now_s=T0 + 1.05).version > a.version


def test_a_recent_snapshot_taken_before_the_first_steps_is_not_handed_out_once_they_came() -> None:
    store = LiveStore()
    for r in range(2):
        store.on_batch(batch(f"a{r}", [hello(f"a{r}", [r])]), T0)
    empty = store.snapshot(now_s=T0)  # a frame built while the ranks had only said hello
    assert store.recent_snapshot(now_s=T0 + 0.1) is empty and empty.steps_total == 0
    store.on_batch(batch("a0", [step(0, 0, T0 + 0.2)], seq=1), T0 + 0.2)
    assert store.recent_snapshot(now_s=T0 + 0.3).steps_total == 1  # not the 0 of 0.3 s ago (the runs table's row)
    with_steps = store.snapshot(now_s=T0 + 0.3)
    store.on_batch(batch("a1", [step(1, 0, T0 + 0.4)], seq=1), T0 + 0.4)
    assert store.recent_snapshot(now_s=T0 + 0.5) is with_steps  # from then on cached for up to max_age_s, as before


def test_first_batch_is_kept_out_of_steady_pictures_but_updates_the_table() -> None:
    store = LiveStore()
    store.on_batch(batch("a", [Step(0, 0, T0, T0 + 5, 5.0, 4.9, 0.1, None, None, None, None, None, None, True)]),
                   T0 + 5)
    snap = store.snapshot(now_s=T0 + 5)
    assert snap.current_step[0] == 0 and math.isnan(snap.recent_data_wait_s[0])
    assert np.all(np.isnan(snap.heat_data_wait_share))


def test_concurrent_ingest_and_snapshots_do_not_break() -> None:
    store = LiveStore()
    stop = time.monotonic() + 1.0
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            k = 0
            while time.monotonic() < stop:
                store.on_batch(batch(f"w{offset}", [step(offset * 100 + k % 50, k, T0 + k * 0.01)], seq=k), T0)
                k += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    frames = 0
    while time.monotonic() < stop:
        snap = store.snapshot()
        assert snap.ranks.size == snap.heat_data_wait_share.shape[0] == len(snap.state)
        frames += 1
    for t in threads:
        t.join(5)
    assert not errors and frames > 0
    assert store.snapshot().ranks.size == 100


def test_a_bad_record_is_counted_not_raised() -> None:
    store = LiveStore()
    bad = Batch("a", 0, T0, (1, 0), [Step(0, 0, T0, T0 + 1, "x", None)])  # type: ignore[arg-type]
    store.on_batch(bad, T0)
    assert store.snapshot().counters["bad_records"] == 1


def test_straggler_cause_is_the_phase_where_it_exceeds_the_others_not_the_largest_phase() -> None:
    # The demo's situation: every rank waits 20 ms for data, rank 1 computes 40 ms longer, so rank 0 waits ~40 ms
    # in AllReduce. Rank 1 is late because of compute, even though its data wait (20 ms) is half the gap.
    ranks = np.array([0, 1], float)
    step_s = np.full(2, 0.065)
    data = np.array([0.020, 0.020])
    compute = np.array([0.002, 0.042])
    comm = np.array([0.042, 0.002])
    by_compute = find_live_straggler(ranks, step_s, comm, data, compute)
    assert by_compute is not None and by_compute.rank == 1 and "slower compute" in by_compute.reason
    # Same gap, but this time rank 1 waits 40 ms longer for its batches than rank 0.
    by_data = find_live_straggler(ranks, step_s, comm, np.array([0.002, 0.042]), np.array([0.020, 0.020]))
    assert by_data is not None and by_data.rank == 1 and "data loader" in by_data.reason


def test_a_snapshot_does_not_change_when_more_steps_arrive() -> None:
    # The per-rank arrays are copies, not views into the live buffers the collector keeps writing.
    store = LiveStore()
    feed_cluster(store, 3, 5)
    snap = store.snapshot(now_s=T0 + 1)
    before = (snap.current_step.copy(), snap.last_seen_s.copy(), snap.ranks.copy(), snap.heat_data_wait_share.copy())
    for r in range(3):
        store.on_batch(batch(f"a{r}", [step(r, 40, T0 + 2.0, comm=0.09)], seq=50), T0 + 9)
    newer = store.snapshot(now_s=T0 + 2.05)
    assert list(newer.current_step) == [40] * 3
    kept_arrays = (snap.current_step, snap.last_seen_s, snap.ranks, snap.heat_data_wait_share)
    for old, kept in zip(before, kept_arrays, strict=True):
        assert np.array_equal(old, kept, equal_nan=True)


def test_device_series_are_rebuilt_only_for_the_gpus_that_sampled() -> None:
    store = LiveStore()
    samples = [GpuSample(T0, f"h{g // 2}", g % 2, util_pct=float(g)) for g in (3, 0, 2, 1)]
    store.on_batch(batch("a", samples), T0)
    first = store.snapshot(now_s=T0)
    assert [(g.host, g.gpu_index) for g in first.gpus] == [("h0", 0), ("h0", 1), ("h1", 0), ("h1", 1)]
    store.on_batch(batch("a", [GpuSample(T0 + 0.5, "h1", 0, util_pct=77.0)], seq=1), T0 + 0.5)
    second = store.snapshot(now_s=T0 + 0.5)
    assert second.gpus is not first.gpus
    assert [a is b for a, b in zip(first.gpus, second.gpus, strict=True)] == [True, True, False, True]
    assert list(second.gpus[2].util_pct) == [2.0, 77.0]
    with pytest.raises(ValueError):
        second.gpus[2].util_pct[0] = 1.0
    # a new GPU appears in sorted place
    store.on_batch(batch("a", [GpuSample(T0 + 1, "h0", 2, util_pct=5.0)], seq=2), T0 + 1)
    assert [(g.host, g.gpu_index) for g in store.snapshot(now_s=T0 + 1).gpus][:3] == [("h0", 0), ("h0", 1), ("h0", 2)]


def test_device_ring_keeps_the_newest_readings_in_order() -> None:
    store = LiveStore(series_len=4)
    store.on_batch(batch("a", [GpuSample(T0 + i, "h", 0, util_pct=float(i)) for i in range(7)]), T0 + 7)
    (gpu,) = store.snapshot(now_s=T0 + 7).gpus
    assert list(gpu.util_pct) == [3.0, 4.0, 5.0, 6.0] and list(gpu.ts_s) == [T0 + 3, T0 + 4, T0 + 5, T0 + 6]


def test_snapshot_module_is_the_same_types() -> None:
    from ringscope.gui.core.live import snapshot

    assert snapshot.Snapshot is __import__("ringscope.gui.core.live.store", fromlist=["Snapshot"]).Snapshot
    assert snapshot.find_live_straggler is find_live_straggler and snapshot.STATE_LOST == STATE_LOST


@pytest.mark.parametrize("slow", [None, 2])
def test_live_and_whole_run_straggler_verdicts_come_from_one_rule(slow: int | None) -> None:
    from ringscope.gui.core.analysis.summary import analyze

    store = LiveStore()
    feed_cluster(store, 4, 25, slow=slow)
    live = store.snapshot(now_s=T0 + 2.6).straggler
    whole = analyze(store.to_session_data()).straggler
    assert (live is None) == (whole is None) == (slow is None)
    if live is not None and whole is not None:
        assert live.rank == whole.rank == slow
        assert live.others_wait_share == pytest.approx(whole.gap_share, rel=0.05)


def test_the_store_keeps_how_long_each_agents_messages_queued_for_the_live_network_analysis() -> None:
    store = LiveStore()
    for agent, rank, host in (("a", 0, "node0"), ("b", 1, "node1")):
        store.on_batch(wire.decode(wire.encode(agent, 0, T0, [hello(agent, [rank], host)])), T0 + 0.001)
    for k in range(1, 41):
        sent = T0 + 0.1 * k
        store.on_batch(wire.decode(wire.encode("a", k, sent, [step(0, k, sent)])), sent + 0.001)  # never queued
        late = 0.030 if k % 2 else 0.0  # b's link queues every other message 30 ms
        store.on_batch(wire.decode(wire.encode("b", k, sent, [step(1, k, sent)])), sent + 0.001 + late)
    transit = store.to_session_data().counters["transit"]
    assert transit["a"].messages == transit["b"].messages == 41
    assert transit["a"].quantile(0.9) < 0.001
    assert 0.02 <= transit["b"].quantile(0.9) <= 0.05
    transit["b"].observe(T0, T0 + 9.0)  # a copy: the store's own figures do not move
    assert store.to_session_data().counters["transit"]["b"].messages == 41
