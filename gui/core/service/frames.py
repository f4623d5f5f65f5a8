"""Compact frames: a ``Snapshot`` sent from the ingest process to the window as what changed since the last one.

A 1024-rank snapshot holds two ranks x buckets heat matrices (2 x 2.4 MB) and 1024 GPU series; at 30 frames a
second, sending them whole would move ~200 MB/s through the pipe and cost the GUI thread more to unpickle than the
snapshot it saves. Between two frames only a few heat columns and the GPUs sampled since change, so a frame carries:

- the per-rank arrays and figures whole (a few hundred kB at 1024 ranks);
- heat columns by their stamp (``Snapshot.bucket_stamp``: a column's stamp changes whenever its contents do and is
  never shared): columns whose stamp the window already holds are taken from its previous frame, stamp 0 is a
  never-written (NaN) column, and only the others travel;
- the GPU series that are new objects since the last frame (the store rebuilds only GPUs that took a reading), the
  GPU order only when it changed, and the hosts tuples only when they are new objects.

A frame is a delta against the frame the window says it holds (``base``); the encoder sends a whole frame when the
window holds another one (a run switch, the first frame), when the ranks or the bucket width changed.

What it owns: ``FrameEncoder`` (ingest process, one per window connection) and ``FrameDecoder`` (window process).
What it must never do: import Qt, keep references that outlive a frame beyond the one previous frame per side, or
hand out arrays a later frame writes into (decoded heat matrices are fresh and read-only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from gui.core.live.snapshot import GpuSeries, Snapshot, readonly

__all__ = ["FrameDecoder", "FrameEncoder", "FrameError"]

_HEAT: Final[tuple[str, ...]] = ("heat_data_wait_share", "heat_comm_exposed_share")
_SPECIAL: Final[frozenset[str]] = frozenset({*_HEAT, "gpus", "host_states", "hosts"})
_PLAIN: Final[tuple[str, ...]] = tuple(f.name for f in dataclasses.fields(Snapshot) if f.name not in _SPECIAL)
_GpuKey = tuple[str, int]


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


class FrameEncoder:
    """Turns snapshots into frames for one window (ingest process side)."""

    def __init__(self) -> None:
        self._sent: _Sent | None = None
        self._next_id = 1
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
        out["heat_send"] = send
        out["heat"] = {name: np.ascontiguousarray(getattr(snap, name)[:, send]) for name in _HEAT}
        self.last_heat_columns = int(send.size)
        gpu_order = tuple((g.host, g.gpu_index) for g in snap.gpus)
        known = previous.gpus if delta and previous is not None else {}
        out["gpu_order"] = gpu_order if not delta or previous is None or gpu_order != previous.gpu_order else None
        out["gpus"] = [g for key, g in zip(gpu_order, snap.gpus, strict=True) if known.get(key) is not g]
        same_hosts = delta and previous is not None and previous.hosts is snap.hosts
        out["hosts"] = None if same_hosts else snap.hosts
        same_states = delta and previous is not None and previous.host_states is snap.host_states
        out["host_states"] = None if same_states else snap.host_states
        self._sent = _Sent(frame_id, snap.run_id, snap.ranks, snap.bucket_s, stamps,
                           dict(zip(gpu_order, snap.gpus, strict=True)), gpu_order, snap.hosts, snap.host_states)
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
        if frame["base"] and previous is not None:
            old_stamps = np.asarray(previous.bucket_stamp)
            position = {int(s): i for i, s in enumerate(old_stamps.tolist()) if s}
            new_cols, old_cols = [], []
            for j, s in enumerate(stamps.tolist()):
                i = position.get(int(s)) if s else None
                if i is not None:
                    new_cols.append(j)
                    old_cols.append(i)
        for name in _HEAT:
            matrix = np.full((n, t), np.nan, np.float32)
            if frame["base"] and previous is not None and new_cols:
                _copy_columns(matrix, getattr(previous, name), new_cols, old_cols)
            if send.size:
                matrix[:, send] = frame["heat"][name]
            heat[name] = readonly(matrix)
        if not frame["base"]:
            self._gpus = {}
        if frame["gpu_order"] is not None:
            self._gpu_order = tuple(frame["gpu_order"])
        for g in frame["gpus"]:
            self._gpus[(g.host, g.gpu_index)] = g
        try:
            gpus = tuple(self._gpus[key] for key in self._gpu_order)
        except KeyError as exc:
            raise FrameError(f"frame {frame['id']} names GPU {exc} it never sent") from exc
        if len(self._gpus) > len(self._gpu_order):  # a GPU left the order: forget its series
            self._gpus = {key: self._gpus[key] for key in self._gpu_order}
        hosts = frame["hosts"] if frame["hosts"] is not None else (previous.hosts if previous is not None else ())
        states = (frame["host_states"] if frame["host_states"] is not None
                  else (previous.host_states if previous is not None else ()))
        snap = Snapshot(**plain, **heat, gpus=gpus, host_states=states, hosts=hosts)
        self._snap, self.base = snap, int(frame["id"])
        return snap


def _copy_columns(into: np.ndarray, source: np.ndarray, new_cols: list[int], old_cols: list[int]) -> None:
    """``into[:, new_cols] = source[:, old_cols]``, as one slice copy when both runs are contiguous (the usual
    case: the ring moved by a bucket or not at all)."""
    first_new, first_old, count = new_cols[0], old_cols[0], len(new_cols)
    if new_cols[-1] - first_new == count - 1 and old_cols[-1] - first_old == count - 1:
        into[:, first_new:first_new + count] = source[:, first_old:first_old + count]
    else:
        into[:, new_cols] = source[:, old_cols]
