"""The many-GPU summary the store builds for the GPU panel: the same figures the panel computed itself, rebuilt at
most every EVERY_S, absent with few GPUs."""

from __future__ import annotations

import numpy as np

from ringscope.agent.schema import GpuSample
from ringscope.gui.core.analysis.quantiles import column_percentiles
from ringscope.gui.core.live import gpu_summary
from ringscope.gui.core.live.store import LiveStore
from tests.gui.core.live.test_store import T0, batch


def _feed(store: LiveStore, gpus: int, seconds: int) -> None:
    for k in range(seconds * 2):  # 2 Hz, like the agents
        now = T0 + 0.5 * k
        store.on_batch(batch("a", [GpuSample(now, f"node{g // 8}", g % 8, util_pct=float((g * 7 + k) % 100),
                                              mem_used_bytes=g, mem_total_bytes=100) for g in range(gpus)], seq=k),
                       now)


def test_many_gpus_get_a_summary_equal_to_binning_every_series_and_few_get_none() -> None:
    few = LiveStore()
    _feed(few, gpu_summary.SUMMARY_ABOVE, 5)
    assert few.snapshot(now_s=T0 + 5).gpu_summary is None

    store = LiveStore()
    _feed(store, 40, 150)  # longer than the 120 s window
    now = T0 + 150
    snap = store.snapshot(now_s=now)
    summary = snap.gpu_summary
    assert summary is not None and summary.end_s == now
    expected = column_percentiles(gpu_summary.bin_series([(g.ts_s, g.util_pct) for g in snap.gpus], now),
                                  gpu_summary.QUANTILES)
    np.testing.assert_array_equal(summary.band, expected)
    assert summary.band.shape == (3, gpu_summary.WINDOW_S) and np.isfinite(summary.band[:, -100:]).all()
    np.testing.assert_array_equal(summary.util_pct, [g.util_pct[-1] for g in snap.gpus])
    np.testing.assert_array_equal(summary.mem_pct, [100.0 * g.mem_used_bytes[-1] / 100 for g in snap.gpus])

    reading = GpuSample(now + 0.1, "node0", 0, util_pct=1.0, mem_total_bytes=100)
    store.on_batch(batch("a", [reading], seq=999), now + 0.1)
    assert store.snapshot(now_s=now + 0.1).gpu_summary is summary  # within EVERY_S: the same summary
    later = store.snapshot(now_s=now + gpu_summary.EVERY_S + 0.1).gpu_summary
    assert later is not summary and later is not None and later.util_pct[0] == 1.0
