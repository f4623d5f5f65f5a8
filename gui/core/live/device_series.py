"""The device half of the live store: per-GPU and per-host reading rings, and the frame series built from them.

What it owns: every GPU's readings as columns of (``series_len`` x GPUs) ring matrices (a column per ``(host,
gpu_index)``, in first-seen order; slot-major, so the first readings of thousands of GPUs map pages gradually),
each GPU's utilization binned per second (a (``BIN_SECONDS`` x GPUs) ring, for
the many-GPU band), one ring per host, the copy-on-change caches that turn them into the immutable ``GpuSeries`` /
``HostState`` tuples and the ``GpuSummary`` of a ``Snapshot``, and their ``SessionData`` columns. ``LiveStore``
(``ringscope.gui.core.live.store``) owns one ``DeviceSeries`` and is its only caller.

Why columns: with 8 192 GPUs sampled at 2 Hz, a frame every 0.25 s finds ~4 000 of them changed; rebuilding their
series from per-GPU rings cost ~50 ms a frame and the band ~45 ms (binning every reading again). Past
``gpu_summary.SUMMARY_ABOVE`` GPUs no view draws a series per GPU, so a frame's ``GpuSeries`` carry the GPU's
identity and last reading only (empty arrays), and the band is built from the per-second bins, recomputing only the
seconds that took a reading since the last summary.

Memory, bounded: per GPU 3 x ``series_len`` float64 readings (14.4 kB at 600) + ``BIN_SECONDS`` x 12 B of bins; per
host one ring of 3 x ``series_len``.

What it must never do: import Qt, take a lock of its own (the store's lock guards it, see ``DeviceSeries``), grow
without bound, or turn a missing reading into 0 (it stays NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import GpuSample, HostSample
from ringscope.gui.core.analysis.quantiles import column_percentiles
from ringscope.gui.core.live import gpu_summary
from ringscope.gui.core.live.snapshot import GpuSeries, GpuSummary, HostState, readonly
from ringscope.gui.core.session_data import Columns, empty_columns

__all__ = ["BIN_SECONDS", "DeviceSeries"]

_GPU_COLUMNS = ("ts_s", "util_pct", "mem_used_bytes")
_HOST_COLUMNS = ("ts_s", "cpu_pct", "mem_used_bytes")
_HOST_MIN_INTERVAL_S = 0.2  # many agents on one host each send its reading: keep one per this many seconds
BIN_SECONDS: Final[int] = gpu_summary.WINDOW_S + 2
"""Seconds of per-GPU utilization bins kept: the band's window and two more for readings that arrive late."""
_NONE: Final[np.ndarray] = readonly(np.zeros(0))  # a many-GPU frame's series: identity and last reading only
SESSION_GPU_READINGS: Final[int] = 1 << 19
"""GPU readings in a live ``SessionData`` at most (what the live analysis reads every pass, ~50 MB as columns): up
to ~870 GPUs all 600 kept readings each, at 8 192 GPUs each one's newest 64 (32 s at 2 Hz; the steps' budget,
``store.SESSION_STEPS``, leaves a rank its newest 32 steps there)."""
SESSION_GPU_READINGS_MIN: Final[int] = 16


@dataclass(slots=True)
class _Ring:
    """A fixed-size ring of float64 columns (one ring per host)."""

    names: tuple[str, ...]
    size: int
    count: int = 0
    data: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = {name: np.full(self.size, np.nan) for name in self.names}

    def append(self, values: dict[str, float | None]) -> None:
        slot = self.count % self.size
        for name in self.names:
            value = values.get(name)
            self.data[name][slot] = np.nan if value is None else value
        self.count += 1

    def ordered(self, name: str) -> np.ndarray:
        """A copy of the column, oldest first."""
        return _oldest_first(self.data[name], self.count)


class _GpuRings:
    """Every GPU's readings as columns of three (``size`` x GPUs) ring matrices, and per-second utilization bins.

    ``take`` costs a few scalar writes (~2 µs); the matrices double as GPUs appear.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows = 0
        self.count: list[int] = []  # readings taken per row
        self.latest: list[GpuSample] = []
        # Slot-major (``size`` x GPU rows): reading k of every GPU is one contiguous row, so the first readings of
        # thousands of GPUs map a few pages, not a page of every GPU's row (rank-major with NaN-filled rows, 8 192
        # GPUs' first readings mapped 137 MB: ~0.9 s of page faults on the collector thread on this project's VMs).
        # Slots past a GPU's ``count`` hold nothing and are never read.
        self.data = {name: np.zeros((size, 0)) for name in _GPU_COLUMNS}
        self.total = np.zeros(0)  # mem_total_bytes per row (NaN: unknown)
        # per-second means of utilization: column slot = second % BIN_SECONDS holds the second bin_sec[slot]
        self.bin_sum = np.zeros((BIN_SECONDS, 0))
        self.bin_n = np.zeros((BIN_SECONDS, 0), np.int32)
        self.bin_sec = [-1] * BIN_SECONDS
        self.bins_touched: set[int] = set()  # seconds that took a reading since the band last read them

    def add(self) -> int:
        row = self.rows
        if row == self.total.size:
            cap = max(8, 2 * row)
            in_use = min(self.size, max(self.count, default=0))
            self.data = {name: _reserved(m, cap, in_use) for name, m in self.data.items()}
            self.total = np.concatenate((self.total, np.full(cap - row, np.nan)))
            self.bin_sum = np.concatenate((self.bin_sum, np.zeros((BIN_SECONDS, cap - row))), axis=1)
            self.bin_n = np.concatenate((self.bin_n, np.zeros((BIN_SECONDS, cap - row), np.int32)), axis=1)
        self.rows += 1
        self.count.append(0)
        self.latest.append(None)  # type: ignore[arg-type]  # set by the take that follows at once
        return row

    def take(self, row: int, g: GpuSample) -> None:
        k = self.count[row]
        slot = k % self.size
        self.data["ts_s"][slot, row] = g.ts_s
        self.data["util_pct"][slot, row] = math.nan if g.util_pct is None else g.util_pct
        self.data["mem_used_bytes"][slot, row] = math.nan if g.mem_used_bytes is None else g.mem_used_bytes
        if g.mem_total_bytes is not None:
            self.total[row] = g.mem_total_bytes
        self.count[row] = k + 1
        self.latest[row] = g
        if g.util_pct is not None and math.isfinite(g.ts_s) and math.isfinite(g.util_pct):
            self._bin(row, math.floor(g.ts_s), g.util_pct)

    def _bin(self, row: int, second: int, value: float) -> None:
        slot = second % BIN_SECONDS
        held = self.bin_sec[slot]
        if held != second:
            if second < held:
                return  # older than every second the ring keeps
            self.bin_sum[slot] = 0.0  # the slot's old second left the ring
            self.bin_n[slot] = 0
            self.bin_sec[slot] = second
            self.bins_touched.discard(held)  # at most BIN_SECONDS kept, whether or not a summary reads them
        self.bin_sum[slot, row] += value
        self.bin_n[slot, row] += 1
        self.bins_touched.add(second)

    def series(self, row: int, many: bool) -> GpuSeries:
        g = self.latest[row]
        total = self.total[row]
        if many:
            return GpuSeries(g.host, g.gpu_index, g.name, g.rank, _NONE, _NONE, _NONE, float(total), g)
        k = self.count[row]
        ts, util, mem = (readonly(_oldest_first(self.data[name][:, row], k)) for name in _GPU_COLUMNS)
        return GpuSeries(g.host, g.gpu_index, g.name, g.rank, ts, util, mem, float(total), g)

    def last(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The newest reading of ``name`` for each of ``rows`` (every row has at least one)."""
        counts = np.asarray(self.count, np.int64)[rows]
        return self.data[name][(counts - 1) % self.size, rows]

    def second_band(self, second: int) -> np.ndarray:
        """(p5, p50, p95) over GPUs of their mean utilization in ``second`` (NaN when none read then)."""
        slot = second % BIN_SECONDS
        if self.bin_sec[slot] != second:
            return np.full(len(gpu_summary.QUANTILES), np.nan)
        n = self.bin_n[slot, :self.rows]
        with np.errstate(all="ignore"):
            means = np.where(n > 0, self.bin_sum[slot, :self.rows] / n, np.nan)
        return column_percentiles(means[:, None], gpu_summary.QUANTILES)[:, 0]


class DeviceSeries:
    """GPU and host readings of a live session, kept in rings of ``series_len`` readings each.

    Locking: this class has no lock of its own. Every method must be called with the owning ``LiveStore``'s
    ``_lock`` held: ``take_gpu`` / ``take_host`` from ``on_batch`` (collector thread), ``frame`` and ``summary``
    from the snapshot copy and ``gpu_columns`` / ``host_columns`` from ``to_session_data`` (GUI thread). What
    ``frame`` and ``summary`` return is immutable (frozen series over read-only copies) and may be read after the
    lock is released; the rings themselves never leave this class.

    Args:
        series_len: readings kept per GPU and per host.
    """

    def __init__(self, series_len: int) -> None:
        self._series_len = series_len
        self._gpus = _GpuRings(series_len)
        self._row: dict[tuple[str, int], int] = {}
        self._hosts: dict[str, tuple[_Ring, HostSample]] = {}
        self._version = 0
        self._cache: tuple[int, tuple[GpuSeries, ...], tuple[HostState, ...]] | None = None
        # Copy-on-change: only the GPUs and hosts that took a reading since the last frame are rebuilt; the sorted
        # order is recomputed only when a GPU or host appears.
        self._gpu_series: list[GpuSeries | None] = []
        self._host_series: dict[str, HostState] = {}
        self._gpu_dirty: set[int] = set()
        self._host_dirty: set[str] = set()
        self._gpu_order: list[int] | None = None
        self._host_order: list[str] | None = None
        self._many = False  # the frame's series are identity + last reading only (past SUMMARY_ABOVE GPUs)
        self._summary: GpuSummary | None = None
        self._summary_key = (0, math.nan)  # (GPUs, end_s asked) of the last summary
        self._band: dict[int, np.ndarray] = {}  # per second: (p5, p50, p95) over GPUs, for the seconds built

    # ---- Public API (caller holds LiveStore._lock) ---------------------------------------------------------------

    def take_gpu(self, g: GpuSample) -> None:
        """Append one GPU reading to the ring of ``(g.host, g.gpu_index)``."""
        self._version += 1
        key = (g.host, g.gpu_index)
        row = self._row.get(key)
        if row is None:
            row = self._row[key] = self._gpus.add()
            self._gpu_series.append(None)
            self._gpu_order = None
        self._gpus.take(row, g)
        self._gpu_dirty.add(row)

    def take_host(self, h: HostSample) -> None:
        """Keep ``h`` as the host's latest reading; append it to the CPU series unless one came just before."""
        self._version += 1
        entry = self._hosts.get(h.host)
        ring = entry[0] if entry else _Ring(_HOST_COLUMNS, self._series_len)
        if entry is None:
            self._host_order = None
        self._host_dirty.add(h.host)
        if ring.count and h.ts_s - ring.data["ts_s"][(ring.count - 1) % ring.size] < _HOST_MIN_INTERVAL_S:
            self._hosts[h.host] = (ring, h)
            return
        ring.append({"ts_s": h.ts_s, "cpu_pct": h.cpu_pct, "mem_used_bytes": h.mem_used_bytes})
        self._hosts[h.host] = (ring, h)

    def frame(self) -> tuple[tuple[GpuSeries, ...], tuple[HostState, ...]]:
        """The GPU series sorted by ``(host, gpu_index)`` and the host states sorted by host, for one frame.

        Between two calls only the GPUs and hosts that took a reading are rebuilt; the others are the same objects
        as in the previous frame, and with no reading at all the same tuples come back. Past
        ``gpu_summary.SUMMARY_ABOVE`` GPUs the series are empty (identity and ``latest`` only): ``summary`` stands
        for them.
        """
        if self._cache is not None and self._cache[0] == self._version:
            return self._cache[1], self._cache[2]
        many = self._gpus.rows > gpu_summary.SUMMARY_ABOVE
        if many != self._many:
            self._many = many
            self._gpu_dirty.update(range(self._gpus.rows))
        for row in self._gpu_dirty:
            self._gpu_series[row] = self._gpus.series(row, many)
        self._gpu_dirty.clear()
        for name in self._host_dirty:
            ring, h = self._hosts[name]
            self._host_series[name] = HostState(
                h.host, h.gpu_status, h.gpu_status_detail, h.gpu_count, readonly(ring.ordered("ts_s")),
                readonly(ring.ordered("cpu_pct")), math.nan if h.mem_used_bytes is None else float(h.mem_used_bytes),
                math.nan if h.mem_total_bytes is None else float(h.mem_total_bytes))
        self._host_dirty.clear()
        if self._host_order is None:
            self._host_order = sorted(self._hosts)
        built = self._gpu_series
        gpus = tuple(series for row in self._order() if (series := built[row]) is not None)  # all built above
        hosts = tuple(self._host_series[name] for name in self._host_order)
        self._cache = (self._version, gpus, hosts)
        return gpus, hosts

    def summary(self, end_s: float) -> GpuSummary | None:
        """Past ``gpu_summary.SUMMARY_ABOVE`` GPUs: each GPU's latest utilization and memory (in ``frame`` order)
        and the band of the ``WINDOW_S`` whole seconds before ``end_s``; None with fewer GPUs.

        Rebuilt at most every ``gpu_summary.EVERY_S`` (sooner when GPUs appear); only the seconds that took a
        reading since the last one are binned again.
        """
        rings = self._gpus
        if rings.rows <= gpu_summary.SUMMARY_ABOVE:
            return None
        cached = self._summary
        if (cached is not None and self._summary_key[0] == rings.rows
                and 0 <= end_s - self._summary_key[1] < gpu_summary.EVERY_S):
            return cached
        last = math.floor(end_s)  # bins are whole seconds: the band ends with the last complete one
        first = last - gpu_summary.WINDOW_S
        for second in rings.bins_touched:
            self._band.pop(second, None)
        rings.bins_touched.clear()
        band = np.empty((len(gpu_summary.QUANTILES), gpu_summary.WINDOW_S))
        for i, second in enumerate(range(first, last)):
            column = self._band.get(second)
            if column is None:
                column = self._band[second] = rings.second_band(second)
            band[:, i] = column
        for second in [s for s in self._band if not first <= s < last]:
            del self._band[second]
        order = np.asarray(self._order(), np.int64)
        used, total = rings.last("mem_used_bytes", order), rings.total[order]
        with np.errstate(all="ignore"):
            mem = np.where(np.isfinite(total) & (total > 0), 100.0 * used / total, np.nan)
        util = rings.last("util_pct", order)
        for array in (util, mem, band):
            array.setflags(write=False)
        self._summary, self._summary_key = GpuSummary(util, mem, float(last), band), (rings.rows, end_s)
        return self._summary

    def _order(self) -> list[int]:
        """The GPUs' rows sorted by ``(host, gpu_index)``: recomputed only when a GPU appeared."""
        if self._gpu_order is None:
            self._gpu_order = [row for _, row in sorted(self._row.items())]
        return self._gpu_order

    def gpu_columns(self, budget: int = SESSION_GPU_READINGS, least: int = SESSION_GPU_READINGS_MIN) -> Columns:
        """The kept GPU readings as ``SessionData.gpu`` columns (GPUs in first-seen order, each oldest first): all of
        them, or with more than ``budget`` in all each GPU's newest ``budget // GPUs`` (at least ``least``). One
        gather over the ring matrices, ~1 ms per 30 000 readings."""
        rings = self._gpus
        out = empty_columns("gpu")
        rows, size = rings.rows, rings.size
        if rows == 0:
            return out
        count = np.asarray(rings.count, np.int64)
        keep = np.minimum(count, size)
        if int(keep.sum()) > budget:
            keep = np.minimum(keep, max(least, budget // rows))
        offsets = np.arange(int(keep.max()))
        taken = offsets[None, :] < keep[:, None]
        # each row's last ``keep`` readings, oldest first: ring slots (count - keep + offset) % size
        slots = ((count - keep)[:, None] + offsets[None, :]) % size
        for name in _GPU_COLUMNS:
            matrix = rings.data[name]  # slot-major
            out[name] = matrix.reshape(-1).take((slots * matrix.shape[1] + np.arange(rows)[:, None])[taken])
        latest = rings.latest
        for name in ("host", "uuid", "name"):
            out[name] = np.repeat(np.array([getattr(g, name) for g in latest], object), keep)
        for name in ("gpu_index", "rank"):
            out[name] = np.repeat(np.array([math.nan if (v := getattr(g, name)) is None else float(v)
                                            for g in latest]), keep)
        readings = int(keep.sum())
        for name, column in out.items():
            if len(column) != readings:
                out[name] = np.full(readings, np.nan) if column.dtype != object else np.full(readings, None, object)
        return out

    def host_columns(self) -> Columns:
        """Every kept host reading as ``SessionData.host`` columns (hosts in first-seen order, each oldest first)."""
        return _series_columns("host", [(ring, {"host": s.host, "gpu_count": s.gpu_count,
                                                "gpu_status": s.gpu_status})
                                        for ring, s in self._hosts.values()])


def _oldest_first(column: np.ndarray, count: int) -> np.ndarray:
    """A copy of a ring column holding ``count`` appends, oldest first (slices, not an index array)."""
    size = column.size
    if count <= size:
        return column[:count].copy()
    split = count % size
    return np.concatenate((column[split:], column[:split]))


def _reserved(matrix: np.ndarray, cap: int, slots: int) -> np.ndarray:
    """A slot-major ring ``matrix`` with room for ``cap`` GPU rows: zeroed memory the kernel maps when first
    written, into which doubling copies only the first ``slots`` slots (the ones any GPU has filled)."""
    out = np.zeros((matrix.shape[0], cap), matrix.dtype)
    out[:slots, :matrix.shape[1]] = matrix[:slots]
    return out


def _series_columns(kind: str, entries: list[tuple[_Ring, dict[str, Any]]]) -> Columns:
    out = empty_columns(kind)
    if not entries:
        return out
    parts: dict[str, list[np.ndarray]] = {name: [] for name in out}
    for ring, fixed in entries:
        n = min(ring.count, ring.size)
        for name in out:
            if name in ring.names:
                parts[name].append(ring.ordered(name))
            elif name in fixed and isinstance(fixed[name], str | type(None)) and out[name].dtype == object:
                parts[name].append(np.array([fixed[name]] * n, dtype=object))
            elif name in fixed and fixed[name] is not None:
                parts[name].append(np.full(n, float(fixed[name])))
            else:
                parts[name].append(np.full(n, np.nan) if out[name].dtype != object else np.full(n, None, object))
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}
