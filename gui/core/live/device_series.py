"""The device half of the live store: per-GPU and per-host reading rings, and the frame series built from them.

What it owns: one bounded ring per GPU (keyed by ``(host, gpu_index)``) and per host, the copy-on-change caches that
turn them into the immutable ``GpuSeries`` / ``HostState`` tuples of a ``Snapshot``, and their ``SessionData``
columns. ``LiveStore`` (``ringscope.gui.core.live.store``) owns one ``DeviceSeries`` and is its only caller.

What it must never do: import Qt, take a lock of its own (the store's lock guards it, see ``DeviceSeries``), grow
without bound, or turn a missing reading into 0 (it stays NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ringscope.agent.schema import GpuSample, HostSample
from ringscope.gui.core.live.snapshot import GpuSeries, HostState, readonly
from ringscope.gui.core.session_data import Columns, empty_columns

__all__ = ["DeviceSeries"]

_GPU_COLUMNS = ("ts_s", "util_pct", "mem_used_bytes")
_HOST_COLUMNS = ("ts_s", "cpu_pct", "mem_used_bytes")
_HOST_MIN_INTERVAL_S = 0.2  # many agents on one host each send its reading: keep one per this many seconds


@dataclass(slots=True)
class _Ring:
    """A fixed-size ring of float64 columns (one ring per GPU or host)."""

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
        """A copy of the column, oldest first (slices, not an index array: ~1 000 calls a second)."""
        column = self.data[name]
        if self.count <= self.size:
            return column[:self.count].copy()
        split = self.count % self.size
        return np.concatenate((column[split:], column[:split]))


class DeviceSeries:
    """GPU and host readings of a live session, kept in rings of ``series_len`` readings each.

    Locking: this class has no lock of its own. Every method must be called with the owning ``LiveStore``'s
    ``_lock`` held: ``take_gpu`` / ``take_host`` from ``on_batch`` (collector thread), ``frame`` from the
    snapshot copy and ``gpu_columns`` / ``host_columns`` from ``to_session_data`` (GUI thread). What ``frame``
    returns is immutable (frozen series over read-only copies of the rings) and may be read after the lock is
    released; the rings themselves never leave this class.

    Args:
        series_len: readings kept per GPU and per host.
    """

    def __init__(self, series_len: int) -> None:
        self._series_len = series_len
        self._gpus: dict[tuple[str, int], tuple[_Ring, GpuSample]] = {}
        self._hosts: dict[str, tuple[_Ring, HostSample]] = {}
        self._version = 0
        self._cache: tuple[int, tuple[GpuSeries, ...], tuple[HostState, ...]] | None = None
        # Copy-on-change: with 1024 GPUs sampled at 2 Hz only ~70 change between two frames, so only those are
        # rebuilt; the sorted order is recomputed only when a GPU or host appears.
        self._gpu_series: dict[tuple[str, int], GpuSeries] = {}
        self._host_series: dict[str, HostState] = {}
        self._gpu_dirty: set[tuple[str, int]] = set()
        self._host_dirty: set[str] = set()
        self._gpu_order: list[tuple[str, int]] | None = None
        self._host_order: list[str] | None = None

    # ---- Public API (caller holds LiveStore._lock) ---------------------------------------------------------------

    def take_gpu(self, g: GpuSample) -> None:
        """Append one GPU reading to the ring of ``(g.host, g.gpu_index)``."""
        self._version += 1
        key = (g.host, g.gpu_index)
        entry = self._gpus.get(key)
        ring = entry[0] if entry else _Ring(_GPU_COLUMNS, self._series_len)
        ring.append({"ts_s": g.ts_s, "util_pct": g.util_pct, "mem_used_bytes": g.mem_used_bytes})
        if entry is None:
            self._gpu_order = None
        self._gpus[key] = (ring, g)
        self._gpu_dirty.add(key)

    def take_host(self, h: HostSample) -> None:
        """Keep ``h`` as the host's latest reading; append it to the CPU series unless one came just before."""
        self._version += 1
        entry = self._hosts.get(h.host)
        ring = entry[0] if entry else _Ring(_HOST_COLUMNS, self._series_len)
        if entry is None:
            self._host_order = None
        self._host_dirty.add(h.host)
        if ring.count and h.ts_s - ring.ordered("ts_s")[-1] < _HOST_MIN_INTERVAL_S:
            self._hosts[h.host] = (ring, h)
            return
        ring.append({"ts_s": h.ts_s, "cpu_pct": h.cpu_pct, "mem_used_bytes": h.mem_used_bytes})
        self._hosts[h.host] = (ring, h)

    def frame(self) -> tuple[tuple[GpuSeries, ...], tuple[HostState, ...]]:
        """The GPU series sorted by ``(host, gpu_index)`` and the host states sorted by host, for one frame.

        Between two calls only the GPUs and hosts that took a reading are rebuilt; the others are the same objects
        as in the previous frame, and with no reading at all the same tuples come back.
        """
        # GPU and host samples arrive at a few Hz each: rebuild the series of those that got one (copy-on-change)
        if self._cache is not None and self._cache[0] == self._version:
            return self._cache[1], self._cache[2]
        for key in self._gpu_dirty:
            ring, s = self._gpus[key]
            self._gpu_series[key] = GpuSeries(
                s.host, s.gpu_index, s.name, s.rank, readonly(ring.ordered("ts_s")), readonly(ring.ordered("util_pct")),
                readonly(ring.ordered("mem_used_bytes")),
                math.nan if s.mem_total_bytes is None else float(s.mem_total_bytes), s)
        self._gpu_dirty.clear()
        for name in self._host_dirty:
            ring, h = self._hosts[name]
            self._host_series[name] = HostState(
                h.host, h.gpu_status, h.gpu_status_detail, h.gpu_count, readonly(ring.ordered("ts_s")),
                readonly(ring.ordered("cpu_pct")), math.nan if h.mem_used_bytes is None else float(h.mem_used_bytes),
                math.nan if h.mem_total_bytes is None else float(h.mem_total_bytes))
        self._host_dirty.clear()
        if self._gpu_order is None:
            self._gpu_order = sorted(self._gpus)  # (host, gpu_index)
        if self._host_order is None:
            self._host_order = sorted(self._hosts)
        gpus = tuple(self._gpu_series[key] for key in self._gpu_order)
        hosts = tuple(self._host_series[name] for name in self._host_order)
        self._cache = (self._version, gpus, hosts)
        return gpus, hosts

    def gpu_columns(self) -> Columns:
        """Every kept GPU reading as ``SessionData.gpu`` columns (GPUs in first-seen order, each oldest first)."""
        return _series_columns("gpu", [(ring, {"host": s.host, "gpu_index": s.gpu_index, "uuid": s.uuid,
                                               "name": s.name, "rank": s.rank})
                                       for ring, s in self._gpus.values()])

    def host_columns(self) -> Columns:
        """Every kept host reading as ``SessionData.host`` columns (hosts in first-seen order, each oldest first)."""
        return _series_columns("host", [(ring, {"host": s.host, "gpu_count": s.gpu_count,
                                                "gpu_status": s.gpu_status})
                                        for ring, s in self._hosts.values()])


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
