"""Compact frames: a ``Snapshot`` sent from the ingest process to the window as what changed since the last one.

A 1024-rank snapshot holds two ranks x buckets heat matrices (2 x 2.4 MB) and 1024 GPU series; at 30 frames a
second, sending them whole would move ~200 MB/s through the pipe and cost the GUI thread more to unpickle than the
snapshot it saves. Between two frames only a few heat columns and the GPUs sampled since change, so a frame carries:

- the per-rank arrays and figures whole (a few hundred kB at 1024 ranks);
- heat columns by their stamp (``Snapshot.bucket_stamp``: a column's stamp changes whenever its contents do and is
  never shared): columns whose stamp the window already holds are taken from its previous frame, stamp 0 is a
  never-written (NaN) column, a column that is NaN for every rank does not travel either (the decoder makes what it
  neither holds nor gets NaN), and only the others travel;
- the GPU series that are new objects since the last frame (the store rebuilds only GPUs that took a reading), at
  most every ``GPU_EVERY_S`` and packed as arrays and tuples, the GPU order only when it changed, and the hosts
  tuples only when they are new objects. Past ``SUMMARY_ABOVE`` GPUs a series holds no readings (the frame's
  ``gpu_summary`` stands for them), so only GPUs whose identity changed travel: at 8 192 GPUs a frame would
  otherwise carry ~4 000 of them every 0.25 s for nothing. The summary itself travels when it is a new object.
  ``GpuSeries.latest`` (the whole last NVML reading: power, clocks...) does
  not travel: the metrics endpoint reads it in the ingest process, and no view does.

A frame is a delta against the frame the window says it holds (``base``); the encoder sends a whole frame when the
window holds another one (a run switch, the first frame), when the ranks or the bucket width changed.

What it owns: ``FrameEncoder`` (ingest process, one per window connection) and ``FrameDecoder`` (window process).
What it must never do: import Qt, keep references that outlive a frame beyond the one previous frame per side, or
hand out arrays a later frame writes into (decoded heat matrices are fresh and read-only).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ringscope.gui.core.live.snapshot import GpuSeries, GpuSummary, HostState, Snapshot, readonly

__all__ = ["FrameDecoder", "FrameEncoder", "FrameError"]

_HEAT: Final[tuple[str, ...]] = ("heat_data_wait_share", "heat_comm_exposed_share")
_SPECIAL: Final[frozenset[str]] = frozenset({*_HEAT, "gpus", "host_states", "hosts", "gpu_summary"})
_PLAIN: Final[tuple[str, ...]] = tuple(f.name for f in dataclasses.fields(Snapshot) if f.name not in _SPECIAL)
_GpuKey = tuple[str, int]
_Changed = tuple[int, list[tuple[int, tuple[Any, ...]]]]  # (how many, [(position, field values)])
_SERIES_ARRAYS: Final[tuple[str, ...]] = ("ts_s", "util_pct", "mem_used_bytes")
GPU_EVERY_S: Final[float] = 0.25
"""GPU readings travel at most this often (the GPU panel redraws at most 4 times a second with many GPUs)."""


class FrameError(ValueError):
    """A delta that does not apply to the frame the decoder holds (a protocol bug, never bad telemetry)."""


@dataclass(slots=True)
class _Sent:
    """What the encoder last sent (the window holds exactly this after decoding it)."""

    frame_id: int
    run_id: str
    ranks: np.ndarray
    bucket_s: float
    stamps: np.ndarray
    gpus: dict[_GpuKey, GpuSeries]
    gpu_order: tuple[_GpuKey, ...]
    hosts: tuple[str, ...]
    host_states: tuple[Any, ...]
    gpu_summary: GpuSummary | None


class FrameEncoder:
    """Turns snapshots into frames for one window (ingest process side)."""

    def __init__(self, gpu_every_s: float = GPU_EVERY_S) -> None:
        self._sent: _Sent | None = None
        self._next_id = 1
        self._gpu_every_s = gpu_every_s
        self._gpus_sent_s = -math.inf
        self.last_heat_columns = 0  # heat columns the last frame carried (for the benchmark and tests)

    def encode(self, snap: Snapshot, base: int) -> dict[str, Any]:
        """The frame for ``snap``: a delta when the window holds this encoder's last frame (``base`` is its id)."""
        previous = self._sent
        frame_id, self._next_id = self._next_id, self._next_id + 1
        delta = (previous is not None and base == previous.frame_id and previous.run_id == snap.run_id
                 and previous.bucket_s == snap.bucket_s and np.array_equal(previous.ranks, snap.ranks))
        out: dict[str, Any] = {"id": frame_id, "base": base if delta else 0,
                               "plain": {name: getattr(snap, name) for name in _PLAIN}}
        stamps = np.asarray(snap.bucket_stamp)
        if delta and previous is not None:
            held = np.isin(stamps, previous.stamps) & (stamps != 0)
        else:
            held = np.zeros(stamps.size, bool)
        send = np.flatnonzero(~held & (stamps != 0))
        # Columns without a value for any rank stay behind: the decoder makes every column it neither holds nor gets
        # NaN. The ring's first advance (a run's first steps) empties and stamps all of its columns: at 8 192 ranks
        # that frame carried 600 NaN columns (39 MB to pickle, pipe and unpickle). A column without a step (its
        # cluster mean is NaN) is left out before any copy; the others are checked after theirs.
        send = send[~np.isnan(snap.cluster_phase_s["step"][send])]
        heat = {name: np.ascontiguousarray(getattr(snap, name)[:, send]) for name in _HEAT}
        if send.size > 1:
            empty = np.ones(send.size, bool)
            for columns in heat.values():
                empty &= np.isnan(columns).all(axis=0)
            if empty.any():
                send = send[~empty]
                heat = {name: np.ascontiguousarray(columns[:, ~empty]) for name, columns in heat.items()}
        out["heat_send"] = send
        out["heat"] = heat
        self.last_heat_columns = int(send.size)
        if delta and previous is not None and len(snap.gpus) == len(previous.gpu_order):
            gpu_order = previous.gpu_order  # a store's GPUs only ever join, in (host, index) order: same count, same
        else:                               # order (8 192 keys a frame cost ~3 ms)
            gpu_order = tuple((g.host, g.gpu_index) for g in snap.gpus)
        known = previous.gpus if delta and previous is not None else {}
        gpus = snap.gpus
        if (delta and previous is not None and gpu_order == previous.gpu_order
                and 0 <= snap.now_s - self._gpus_sent_s < self._gpu_every_s):
            gpu_order, gpus = previous.gpu_order, tuple(previous.gpus.values())  # the readings wait a little
        else:
            self._gpus_sent_s = snap.now_s
        out["gpu_order"] = gpu_order if not delta or previous is None or gpu_order != previous.gpu_order else None
        # many GPUs (the store built a summary, under the same lock as the series): series without readings, only a
        # new identity travels; a few GPUs: a series that has no reading yet is still one of those, sent whole
        if snap.gpu_summary is not None:
            changed = [g for key, g in zip(gpu_order, gpus, strict=True)
                       if (held := known.get(key)) is not g and not _same_identity(held, g)]
        else:
            changed = [g for key, g in zip(gpu_order, gpus, strict=True) if known.get(key) is not g]
        out["gpus"] = _pack_gpus(changed)
        same_hosts = delta and previous is not None and previous.hosts is snap.hosts
        out["hosts"] = None if same_hosts else snap.hosts
        held_states = previous.host_states if delta and previous is not None else ()
        out["host_states"] = _pack_changed(held_states, snap.host_states)
        # the many-GPU summary is rebuilt a few times a second, frames come up to 30: send it when it is new
        same_summary = delta and previous is not None and previous.gpu_summary is snap.gpu_summary
        out["gpu_summary"] = None if same_summary else snap.gpu_summary
        out["same_gpu_summary"] = same_summary
        self._sent = _Sent(frame_id, snap.run_id, snap.ranks, snap.bucket_s, stamps,
                           dict(zip(gpu_order, gpus, strict=True)), gpu_order, snap.hosts, snap.host_states,
                           snap.gpu_summary)
        return out


class FrameDecoder:
    """Turns frames back into snapshots (window side). ``base`` is the id to send with the next request."""

    def __init__(self) -> None:
        self._snap: Snapshot | None = None
        self._gpus: dict[_GpuKey, GpuSeries] = {}
        self._gpu_order: tuple[_GpuKey, ...] = ()
        self.base = 0

    def forget(self) -> None:
        """Hold nothing: the next frame asked for comes whole (another run is shown)."""
        self._snap, self._gpus, self._gpu_order, self.base = None, {}, (), 0

    def decode(self, frame: dict[str, Any]) -> Snapshot:
        """The snapshot of ``frame``; raises ``FrameError`` when it is a delta against a frame not held."""
        previous = self._snap
        if frame["base"] and (previous is None or frame["base"] != self.base):
            raise FrameError(f"frame {frame['id']} is a delta against frame {frame['base']}, held {self.base}")
        plain = frame["plain"]
        stamps = np.asarray(plain["bucket_stamp"])
        n, t = len(plain["ranks"]), stamps.size
        send = frame["heat_send"]
        heat: dict[str, Any] = {}
        new_cols = old_cols = np.zeros(0, np.int64)
        if frame["base"] and previous is not None:  # columns held: matched by stamp (unique per column contents)
            old_stamps = np.asarray(previous.bucket_stamp)
            order = np.argsort(old_stamps, kind="stable")
            at = order[np.minimum(np.searchsorted(old_stamps, stamps, sorter=order), old_stamps.size - 1)]
            held = (old_stamps[at] == stamps) & (stamps != 0)
            new_cols, old_cols = np.flatnonzero(held), at[held]
        blank = np.ones(t, bool)  # never-written columns (stamp 0): NaN
        blank[new_cols] = False
        blank[send] = False
        for name in _HEAT:
            matrix = np.empty((n, t), np.float32)
            if new_cols.size and previous is not None:
                _copy_columns(matrix, getattr(previous, name), new_cols, old_cols)
            if send.size:
                matrix[:, send] = frame["heat"][name]
            if blank.any():
                matrix[:, blank] = np.nan
            heat[name] = readonly(matrix)
        if not frame["base"]:
            self._gpus = {}
        if frame["gpu_order"] is not None:
            self._gpu_order = tuple(frame["gpu_order"])
        changed = _unpack_gpus(frame["gpus"])
        for g in changed:
            self._gpus[(g.host, g.gpu_index)] = g
        if frame["base"] and previous is not None and not changed and frame["gpu_order"] is None:
            gpus = previous.gpus  # nothing new: the same tuple (the GPU panel skips an unchanged one)
        else:
            try:
                gpus = tuple(self._gpus[key] for key in self._gpu_order)
            except KeyError as exc:
                raise FrameError(f"frame {frame['id']} names GPU {exc} it never sent") from exc
        if len(self._gpus) > len(self._gpu_order):  # a GPU left the order: forget its series
            self._gpus = {key: self._gpus[key] for key in self._gpu_order}
        hosts = frame["hosts"] if frame["hosts"] is not None else (previous.hosts if previous is not None else ())
        states = _unpack_changed(previous.host_states if frame["base"] and previous is not None else (),
                                 frame["host_states"])
        summary = previous.gpu_summary if frame["same_gpu_summary"] and previous is not None else frame["gpu_summary"]
        snap = Snapshot(**plain, **heat, gpus=gpus, host_states=states, hosts=hosts, gpu_summary=summary)
        self._snap, self.base = snap, int(frame["id"])
        return snap


def _same_identity(held: GpuSeries | None, g: GpuSeries) -> bool:
    """True when ``g`` carries no readings and says nothing ``held`` does not (a many-GPU frame's series)."""
    if held is None or g.ts_s.size or held.ts_s.size or held.name != g.name or held.rank != g.rank:
        return False
    a, b = held.mem_total_bytes, g.mem_total_bytes
    return a == b or (a != a and b != b)  # NaN: unknown in both


def _pack_gpus(series: list[GpuSeries]) -> dict[str, Any] | None:
    """GPU series as three concatenated arrays and plain tuples: unpickling a slots dataclass costs ~30 µs (its
    ``__setstate__`` walks the fields), a tuple next to nothing; 1024 GPUs' readings make ~100 series a frame."""
    if not series:
        return None
    return {"meta": [(g.host, g.gpu_index, g.name, g.rank, g.mem_total_bytes) for g in series],
            "lengths": np.fromiter((g.ts_s.size for g in series), np.int64, len(series)),
            **{name: np.concatenate([getattr(g, name) for g in series]) for name in _SERIES_ARRAYS}}


def _unpack_gpus(packed: dict[str, Any] | None) -> list[GpuSeries]:
    if packed is None:
        return []
    ends = np.cumsum(packed["lengths"]).tolist()
    starts = [0, *ends[:-1]]
    ts, util, mem = (readonly(packed[name]) for name in _SERIES_ARRAYS)  # slices below: views, no copies
    return [GpuSeries(host, index, name, rank, ts[a:b], util[a:b], mem[a:b], total)
            for a, b, (host, index, name, rank, total) in zip(starts, ends, packed["meta"], strict=True)]


def _pack_changed(held: tuple[Any, ...], states: tuple[Any, ...]) -> _Changed | None:
    """The host states that are not the objects the window holds (by position), as plain tuples; None: none."""
    if len(held) == len(states) and all(a is b for a, b in zip(held, states, strict=True)):
        return None
    fields = [f.name for f in dataclasses.fields(HostState)]
    return len(states), [(i, tuple(getattr(h, name) for name in fields)) for i, h in enumerate(states)
                         if i >= len(held) or held[i] is not h]


def _unpack_changed(held: tuple[Any, ...], packed: _Changed | None) -> tuple[Any, ...]:
    if packed is None:
        return held
    count, changed = packed
    states = list(held[:count]) + [None] * max(0, count - len(held))
    for i, values in changed:
        states[i] = HostState(*values)
    return tuple(states)


def _copy_columns(into: np.ndarray, source: np.ndarray, new_cols: np.ndarray, old_cols: np.ndarray) -> None:
    """``into[:, new_cols] = source[:, old_cols]``, as one slice copy when both runs are contiguous (the usual
    case: the ring moved by a bucket or not at all)."""
    first_new, first_old, count = int(new_cols[0]), int(old_cols[0]), new_cols.size
    if new_cols[-1] - first_new == count - 1 and old_cols[-1] - first_old == count - 1:
        into[:, first_new:first_new + count] = source[:, first_old:first_old + count]
    else:
        into[:, new_cols] = source[:, old_cols]
