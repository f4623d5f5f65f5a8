"""The many-GPU summary the store builds for the GPU panel: the same figures as binning every reading of every GPU
(``gpu_summary.bin_series``, what the panel computes itself for few GPUs), rebuilt at most every EVERY_S from the
store's per-second bins, absent with few GPUs."""

from __future__ import annotations

import numpy as np

from ringscope.agent.schema import GpuSample
from ringscope.gui.core.analysis.quantiles import column_percentiles
from ringscope.gui.core.live import gpu_summary
from ringscope.gui.core.live.store import LiveStore
from tests.gui.core.live.test_store import T0, batch


def _feed(store: LiveStore, gpus: int, seconds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Feed ``gpus`` GPUs at 2 Hz (like the agents; GPU g reads at T0 + g / (4 gpus) + k / 2, some readings NaN) and
    return each GPU's (times, utilization) in (host, index) order."""
    sent: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for k in range(seconds * 2):
        records = []
        for g in range(gpus):
            ts = T0 + g / (4 * gpus) + 0.5 * k
            util = float("nan") if (g + k) % 17 == 0 else float((g * 7 + k) % 100)
            records.append(GpuSample(ts, f"node{g // 8:02d}", g % 8, util_pct=util, mem_used_bytes=g,
                                     mem_total_bytes=100))
            sent.setdefault((f"node{g // 8:02d}", g % 8), []).append((ts, util))
        store.on_batch(batch("a", records, seq=k), T0 + 0.5 * k)
    return [(np.array([t for t, _ in r]), np.array([u for _, u in r])) for _, r in sorted(sent.items())]


def test_many_gpus_get_a_summary_equal_to_binning_every_series_and_few_get_none() -> None:
    few = LiveStore()
    _feed(few, gpu_summary.SUMMARY_ABOVE, 5)
    assert few.snapshot(now_s=T0 + 5).gpu_summary is None

    store = LiveStore()
    sent = _feed(store, 40, 150)  # longer than the 120 s window
    now = T0 + 150.7
    snap = store.snapshot(now_s=now)
    summary = snap.gpu_summary
    assert summary is not None and summary.end_s == T0 + 150  # whole seconds: the last complete one ends it
    expected = column_percentiles(gpu_summary.bin_series(sent, T0 + 150), gpu_summary.QUANTILES)
    np.testing.assert_array_equal(summary.band, expected)
    assert summary.band.shape == (3, gpu_summary.WINDOW_S) and np.isfinite(summary.band[:, -100:]).all()
    np.testing.assert_array_equal(summary.util_pct, [u[-1] for _, u in sent])
    np.testing.assert_array_equal(summary.mem_pct, [100.0 * g.latest.mem_used_bytes / 100 for g in snap.gpus])
    # many GPUs: a frame's series carry identity and the last reading, not the readings (no view draws them)
    assert all(g.ts_s.size == 0 and g.latest is not None for g in snap.gpus)

    # readings that arrive late, into a second the band already holds, are binned again
    late = [GpuSample(T0 + 140.2, f"node{g // 8:02d}", g % 8, util_pct=100.0, mem_total_bytes=100) for g in range(40)]
    store.on_batch(batch("a", late, seq=998), now)
    again = store.snapshot(now_s=now + gpu_summary.EVERY_S).gpu_summary
    for g, reading in enumerate(late):
        ts, util = np.append(sent[g][0], reading.ts_s), np.append(sent[g][1], 100.0)
        order = np.argsort(ts, kind="stable")
        sent[g] = (ts[order], util[order])
    assert again is not None and again.end_s == T0 + 150
    np.testing.assert_array_equal(again.band, column_percentiles(gpu_summary.bin_series(sent, T0 + 150),
                                                                 gpu_summary.QUANTILES))
    assert not np.array_equal(again.band, summary.band)
    summary = again
    now += gpu_summary.EVERY_S

    reading = GpuSample(now + 0.1, "node00", 0, util_pct=1.0, mem_total_bytes=100)
    store.on_batch(batch("a", [reading], seq=999), now + 0.1)
    assert store.snapshot(now_s=now + 0.1).gpu_summary is summary  # within EVERY_S: the same summary
    later = store.snapshot(now_s=now + gpu_summary.EVERY_S + 0.1).gpu_summary
    assert later is not summary and later is not None and later.util_pct[0] == 1.0
