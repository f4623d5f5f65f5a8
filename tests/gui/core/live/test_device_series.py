"""DeviceSeries without Qt: real schema samples in, the frame's GPU / host series and SessionData columns out.

The store-level behaviour (through wire batches) is in test_store.py; these tests pin the class's own contract and
one concurrency test checks that LiveStore's lock still covers it.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, GpuStatus, HostSample
from ringscope.gui.core.live.device_series import DeviceSeries
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.session_data import empty_columns
from tests.gui.core.live.test_store import _vm_rss_mb

T0 = 1_700_000_000.0


def test_gpus_sampled_out_of_order_come_out_sorted_with_readings_in_arrival_order() -> None:
    devices = DeviceSeries(series_len=8)
    keys = [("h1", 1), ("h0", 2), ("h1", 0), ("h0", 0)]
    # each GPU's readings arrive interleaved with the others', one of them with an earlier timestamp than the last
    offsets = [0.0, 2.0, 1.0]
    for k, offset in enumerate(offsets):
        for i, (host, index) in enumerate(keys):
            devices.take_gpu(GpuSample(T0 + offset, host, index, util_pct=10.0 * i + k, mem_total_bytes=100 + i))
    gpus, hosts = devices.frame()
    assert [(g.host, g.gpu_index) for g in gpus] == sorted(keys)
    assert hosts == ()
    for g in gpus:
        i = keys.index((g.host, g.gpu_index))
        assert list(g.ts_s) == [T0 + offset for offset in offsets]  # kept as they came: the ring does not reorder
        assert list(g.util_pct) == [10.0 * i + k for k in range(len(offsets))]
        assert np.isnan(g.mem_used_bytes).all()  # never reported: missing, not 0
        assert g.mem_total_bytes == 100 + i


def test_ring_keeps_the_newest_readings_oldest_first() -> None:
    size, taken = 5, 13
    devices = DeviceSeries(series_len=size)
    for i in range(taken):
        devices.take_gpu(GpuSample(T0 + i, "h", 0, util_pct=float(i)))
    (gpu,), _ = devices.frame()
    assert list(gpu.ts_s) == [T0 + i for i in range(taken - size, taken)]
    assert list(gpu.util_pct) == [float(i) for i in range(taken - size, taken)]
    columns = devices.gpu_columns()
    assert list(columns["util_pct"]) == list(gpu.util_pct)


def test_session_columns_hold_every_gpus_newest_readings_and_within_the_budget_its_newest_share() -> None:
    size = 6
    devices = DeviceSeries(series_len=size)
    taken = {("h1", 0): 3, ("h0", 1): 6, ("h0", 0): 14}  # under, at and past the ring's size
    for key, n in taken.items():
        for i in range(n):
            devices.take_gpu(GpuSample(T0 + i, key[0], key[1], uuid=f"U-{key}", name=None if key[1] else "H100",
                                       rank=None if key == ("h1", 0) else 7, util_pct=float(i),
                                       mem_used_bytes=1000 + i))
    full = devices.gpu_columns()
    kept = {key: min(n, size) for key, n in taken.items()}
    assert len(full["ts_s"]) == sum(kept.values())
    at = 0
    for key, n in taken.items():  # first-seen order, each GPU's readings oldest first
        rows = slice(at, at + kept[key])
        assert list(full["util_pct"][rows]) == [float(i) for i in range(n - kept[key], n)]
        assert list(full["mem_used_bytes"][rows]) == [1000.0 + i for i in range(n - kept[key], n)]
        assert set(full["host"][rows]) == {key[0]} and set(full["gpu_index"][rows]) == {float(key[1])}
        assert set(full["uuid"][rows]) == {f"U-{key}"}
        assert set(full["name"][rows]) == {None if key[1] else "H100"}
        assert (np.isnan(full["rank"][rows]).all() if key == ("h1", 0) else set(full["rank"][rows]) == {7.0})
        assert np.isnan(full["sm_clock_mhz"][rows]).all() and np.isnan(full["temp_c"][rows]).all()  # not kept live
        at += kept[key]
    assert all(len(column) == at for column in full.values())

    within = devices.gpu_columns(budget=6)  # 15 readings kept, 6 allowed: each GPU's newest max(16, 6 // 3)
    assert len(within["ts_s"]) == len(full["ts_s"])  # the floor of 16 per GPU keeps them all here
    tight = DeviceSeries(series_len=600)
    for i in range(100):
        for g in range(4):
            tight.take_gpu(GpuSample(T0 + i, "h", g, util_pct=float(i)))
    columns = tight.gpu_columns(budget=200)  # 400 kept, 200 allowed: each GPU's newest 50
    assert len(columns["ts_s"]) == 200
    assert list(columns["util_pct"][:50]) == [float(i) for i in range(50, 100)]
    assert list(columns["gpu_index"][150:]) == [3.0] * 50
    fewest = tight.gpu_columns(budget=1, least=3)  # a floor of one's own: each GPU's newest 3
    assert list(fewest["util_pct"]) == [97.0, 98.0, 99.0] * 4 and list(fewest["gpu_index"][-3:]) == [3.0] * 3


def test_gpus_that_appear_while_others_fill_and_wrap_their_rings_keep_every_reading_through_each_growth() -> None:
    size = 4
    devices = DeviceSeries(series_len=size)
    taken: dict[int, list[float]] = {}
    for k in range(40):  # a new GPU every second reading (the matrices double at 8, 16, 32 GPUs), old ones go on
        for index in range(k // 2 + 1):
            value = 1000.0 * index + k
            devices.take_gpu(GpuSample(T0 + k, "h", index, util_pct=value, mem_used_bytes=int(value)))
            taken.setdefault(index, []).append(value)
    gpus, _ = devices.frame()
    assert len(gpus) == 20  # (past 8 GPUs a frame's series carry the last reading only: the columns hold them all)
    assert [g.util_pct.size for g in gpus] == [0] * 20 and gpus[3].latest.util_pct == 3000.0 + 39
    columns = devices.gpu_columns()
    for index, values in taken.items():
        newest = values[-size:]
        mine = columns["gpu_index"] == index
        assert list(columns["util_pct"][mine]) == newest == list(columns["mem_used_bytes"][mine])


def test_the_first_readings_of_thousands_of_gpus_map_only_the_slots_they_write() -> None:
    # 8 192 GPUs x 600 readings x 3 figures are ~118 MB of rings; one reading each may cost ~0.2 MB of them. GPU
    # rows filled with NaN as they came mapped all of it (137 MB measured: ~0.9 s of page faults on this project's
    # VMs, while thousands of GPUs reported for the first time).
    devices = DeviceSeries(series_len=600)
    before = _vm_rss_mb()
    for gpu in range(8192):
        devices.take_gpu(GpuSample(T0, f"h{gpu // 8}", gpu % 8, util_pct=50.0, mem_used_bytes=1 << 30))
    grew = _vm_rss_mb() - before
    assert devices.gpu_columns()["util_pct"].tolist() == [50.0] * 8192
    assert grew < 40, f"8 192 GPUs' first readings mapped {grew:.0f} MB"


def test_host_without_gpu() -> None:
    devices = DeviceSeries(series_len=8)
    devices.take_host(HostSample(T0, "cpu-box", 12.0, 1, 2, None, None, 0, GpuStatus.NO_GPU, "no lib"))
    gpus, (host,) = devices.frame()
    assert gpus == ()
    assert (host.host, host.gpu_status, host.gpu_status_detail, host.gpu_count) == ("cpu-box", GpuStatus.NO_GPU,
                                                                                    "no lib", 0)
    assert list(host.cpu_pct) == [12.0] and host.mem_used_bytes == 1 and host.mem_total_bytes == 2
    gpu_columns = devices.gpu_columns()
    assert set(gpu_columns) == set(empty_columns("gpu")) and all(c.size == 0 for c in gpu_columns.values())
    host_columns = devices.host_columns()
    assert list(host_columns["host"]) == ["cpu-box"] and list(host_columns["cpu_pct"]) == [12.0]


def test_host_readings_closer_than_the_interval_update_the_state_but_not_the_series() -> None:
    devices = DeviceSeries(series_len=8)
    devices.take_host(HostSample(T0, "h", 10.0, 1, 8))
    devices.take_host(HostSample(T0 + 0.05, "h", 20.0, 2, 8))  # another agent on the same host, just after
    devices.take_host(HostSample(T0 + 1.0, "h", 30.0, 3, 8))
    _, (host,) = devices.frame()
    assert list(host.cpu_pct) == [10.0, 30.0] and list(host.ts_s) == [T0, T0 + 1.0]
    assert host.mem_used_bytes == 3  # the latest reading, whether or not it entered the series


def test_missing_memory_stays_nan() -> None:
    devices = DeviceSeries(series_len=4)
    devices.take_gpu(GpuSample(T0, "h", 0))
    devices.take_host(HostSample(T0, "h", None, None, None, gpu_count=1, gpu_status=GpuStatus.OK))
    (gpu,), (host,) = devices.frame()
    assert math.isnan(gpu.mem_total_bytes) and math.isnan(gpu.util_pct[0])
    assert math.isnan(host.mem_used_bytes) and math.isnan(host.mem_total_bytes) and math.isnan(host.cpu_pct[0])


def test_copy_on_change_keeps_unchanged_series_identical_between_frames() -> None:
    devices = DeviceSeries(series_len=8)
    for index in range(3):
        devices.take_gpu(GpuSample(T0, "h", index, util_pct=float(index)))
    for host in ("a", "b"):
        devices.take_host(HostSample(T0, host, 1.0))
    first_gpus, first_hosts = devices.frame()
    again = devices.frame()
    assert again[0] is first_gpus and again[1] is first_hosts  # nothing sampled: the very same tuples
    devices.take_gpu(GpuSample(T0 + 1, "h", 1, util_pct=50.0))
    devices.take_host(HostSample(T0 + 1, "b", 2.0))
    gpus, hosts = devices.frame()
    assert [a is b for a, b in zip(first_gpus, gpus, strict=True)] == [True, False, True]
    assert [a is b for a, b in zip(first_hosts, hosts, strict=True)] == [True, False]
    assert list(first_gpus[1].util_pct) == [1.0]  # the previous frame's series did not change under it
    assert list(gpus[1].util_pct) == [1.0, 50.0]
    for series in (*gpus, *hosts):
        with pytest.raises(ValueError):
            series.ts_s[0] = 0.0


def test_store_lock_covers_device_series_under_concurrent_ingest() -> None:
    # Writers feed GPU and host samples while the GUI side takes frames and SessionData: each frame's columns must
    # be consistent (same length, newest last), which a read racing an append would break.
    store = LiveStore(series_len=32)
    stop = time.monotonic() + 1.0
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            k = 0
            while time.monotonic() < stop:
                ts = T0 + k
                records = [GpuSample(ts, f"h{w}", g, util_pct=float(k), mem_used_bytes=k) for g in range(4)]
                records.append(HostSample(ts, f"h{w}", float(k)))
                store.on_batch(wire.decode(wire.encode(f"w{w}", k, ts, records)), ts)
                k += 1
        except BaseException as exc:  # handed to the main thread, which fails the test
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(2)]
    for thread in threads:
        thread.start()
    frames = 0
    try:
        while time.monotonic() < stop:
            snap = store.snapshot(now_s=T0 + frames)
            for g in snap.gpus:
                assert g.ts_s.size == g.util_pct.size == g.mem_used_bytes.size
                assert np.all(np.diff(g.ts_s) > 0)
                assert np.array_equal(g.util_pct, g.ts_s - T0)
            for h in snap.host_states:
                assert h.ts_s.size == h.cpu_pct.size
            data = store.to_session_data()
            assert len({c.size for c in data.gpu.values()}) <= 1 and len({c.size for c in data.host.values()}) <= 1
            frames += 1
    finally:
        for thread in threads:
            thread.join(timeout=5.0)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    assert frames > 0
    assert store.snapshot().counters["bad_records"] == 0


def test_per_second_bins_stay_bounded_when_no_summary_reads_them() -> None:
    # few GPUs: no many-GPU summary is ever built, so nothing clears the seconds that took readings; the ring's
    # reuse of a slot must, or a week-long run would keep a set entry per second
    from ringscope.gui.core.live.device_series import BIN_SECONDS

    devices = DeviceSeries(series_len=8)
    for second in range(5 * BIN_SECONDS):
        devices.take_gpu(GpuSample(T0 + second, "h", 0, util_pct=50.0))
    assert devices.summary(T0 + 5 * BIN_SECONDS) is None
    assert len(devices._gpus.bins_touched) <= BIN_SECONDS
