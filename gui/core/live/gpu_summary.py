"""The many-GPU picture of one frame: each GPU's latest utilization and memory, and the fleet's utilization band
(5th, 50th and 95th percentile per second) over the last ``WINDOW_S`` seconds.

Past ``SUMMARY_ABOVE`` GPUs the window draws this instead of one line per GPU. The store builds it where it is
(the ingest process for a live window), at most every ``EVERY_S``, from per-second bins it keeps as readings arrive
(``DeviceSeries.summary``), so the GUI thread draws 3 x 120 points and a bar per GPU instead of binning thousands of
series. ``summarize`` / ``bin_series`` here compute the same figures from whole series: the panel's few-GPU case,
and the reference the store's bins are tested against.

What it must never do: import Qt, or turn a missing reading into 0 (NaN stays NaN; an empty second is NaN).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringscope.gui.core.analysis.quantiles import column_percentiles
from ringscope.gui.core.live.snapshot import GpuSeries, GpuSummary

__all__ = ["EVERY_S", "SUMMARY_ABOVE", "WINDOW_S", "GpuSummary", "bin_series", "summarize"]

WINDOW_S: Final[int] = 120
"""Seconds of GPU utilization the window's series chart shows, in 1 s bins."""
SUMMARY_ABOVE: Final[int] = 8
"""More GPUs than this are drawn as a band (the summary); up to this many, one line each."""
EVERY_S: Final[float] = 0.25
"""A summary is rebuilt at most this often (each GPU samples at ~2 Hz: 4 a second show every sample)."""
QUANTILES: Final[tuple[float, float, float]] = (0.05, 0.5, 0.95)


def summarize(gpus: tuple[GpuSeries, ...], end_s: float) -> GpuSummary:
    """The summary of ``gpus`` with bins ending at ``end_s``."""
    n = len(gpus)
    util = np.fromiter((g.util_pct[-1] if g.util_pct.size else np.nan for g in gpus), float, n)
    used = np.fromiter((g.mem_used_bytes[-1] if g.mem_used_bytes.size else np.nan for g in gpus), float, n)
    total = np.fromiter((g.mem_total_bytes for g in gpus), float, n)
    with np.errstate(all="ignore"):
        mem = np.where(np.isfinite(total) & (total > 0), 100.0 * used / total, np.nan)
    band = column_percentiles(bin_series([(g.ts_s, g.util_pct) for g in gpus], end_s), QUANTILES)
    for array in (util, mem, band):
        array.setflags(write=False)
    return GpuSummary(util, mem, end_s, band)


def bin_series(series: list[tuple[np.ndarray, np.ndarray]], now: float) -> np.ndarray:
    """Series x 1 s bins of the last ``WINDOW_S`` seconds before ``now`` (mean per bin, NaN where a series sent
    nothing). Each series is oldest first."""
    size = len(series) * WINDOW_S
    if not series:
        return np.zeros((0, WINDOW_S))
    # one pass over all series' readings together: per-series numpy calls cost ~7 ms with 1024 GPUs
    # only the readings inside the window: ~2/5 of what the store keeps
    start = now - WINDOW_S
    tails = [(ts[first:], v[first:]) for ts, v in series for first in (int(np.searchsorted(ts, start)),)]
    lengths = np.fromiter((ts.size for ts, _ in tails), np.int64, len(tails))
    # in place and in int32 where possible: every 2 MB temporary here is ~500 page faults (~1 ms on this VM)
    offset = np.concatenate([ts for ts, _ in tails])
    values = np.concatenate([v for _, v in tails])
    np.subtract(offset, start, out=offset)
    np.floor(offset, out=offset)
    keep = (offset >= 0) & (offset < WINDOW_S) & np.isfinite(values)
    flat = np.repeat(np.arange(0, size, WINDOW_S, dtype=np.int32), lengths)[keep]
    flat += offset[keep].astype(np.int32)
    sums = np.bincount(flat, values[keep], minlength=size)
    counts = np.bincount(flat, minlength=size)
    with np.errstate(all="ignore"):
        return (sums / counts).reshape(len(series), WINDOW_S)
