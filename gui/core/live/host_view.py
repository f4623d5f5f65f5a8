"""Ranks grouped by host, for the window at thousands of ranks: the hosts of a frame, one host's ranks as a frame of
their own (the drill-down), and per-host means of a ranks x time matrix (the heat map by host).

A node is usually 8 GPUs, and torchrun, TF_CONFIG and Slurm's block distribution fill ranks host by host, so in a
snapshot (rows in rank order) a host's ranks are one run of rows. A host whose ranks are not contiguous is still
one host here: its rows are gathered (``rows_of``), and the by-host heat map gives each run of rows its own row.

What it must never do: import Qt, turn a missing value into 0 (a host row is NaN where none of its ranks has data),
or copy more than the drilled-down host's rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ringscope.gui.core.live.snapshot import Snapshot, readonly

__all__ = ["HOST_ROWS_ABOVE", "HostRuns", "focus", "fold_rows", "host_means", "host_runs", "rows_of"]

HOST_ROWS_ABOVE: Final[int] = 512
"""More ranks than this (on more than one host): the heat maps draw a row per host, not per rank. 512 rows is about
what a heat map's height shows one pixel each; past it, rank rows would be sampled, and a bad rank could be dropped
from the picture."""

_PER_RANK: Final[tuple[str, ...]] = (
    "ranks", "last_seen_s", "current_step", "recent_step_s", "recent_data_wait_s", "recent_compute_s",
    "recent_comm_exposed_s", "drops", "gaps", "heat_data_wait_share", "heat_comm_exposed_share", "rank_steps",
    "rank_samples")
"""The ``Snapshot`` arrays with one entry (or row) per rank, in ``ranks`` order."""


@dataclass(frozen=True, slots=True)
class HostRuns:
    """Consecutive rows of the same host: ``starts[i]`` is the first row of run ``i``, ``names[i]`` its host, of
    ``rows`` rows in all."""

    starts: np.ndarray
    names: tuple[str, ...]
    rows: int = 0

    @property
    def ends(self) -> np.ndarray:
        """One past the last row of each run."""
        return np.r_[self.starts[1:], self.rows] if self.starts.size else self.starts


def host_runs(hosts: tuple[str, ...]) -> HostRuns:
    """The runs of equal hosts in ``hosts`` (a snapshot's ``hosts``, one per rank row)."""
    if not hosts:
        return HostRuns(np.zeros(0, np.int64), ())
    names = np.asarray(hosts, dtype=object)
    starts = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
    return HostRuns(starts, tuple(names[starts].tolist()), len(hosts))


def rows_of(snap: Snapshot, host: str) -> np.ndarray:
    """The rows of ``snap`` whose rank runs on ``host`` (in rank order; empty when none does)."""
    return np.flatnonzero(np.asarray(snap.hosts, dtype=object) == host)


_last_focus: dict[tuple[str, int, float, str], Snapshot] = {}
"""The last slice, by (run, version, time, host) of the frame it came from: the frame itself is not held (at 8 192
ranks its heat maps are tens of MB, kept for as long as nobody drilled down again)."""


def focus(snap: Snapshot, host: str) -> Snapshot:
    """``snap`` with only the ranks of ``host``: the drill-down's frame (the cluster-wide figures stay whole, so the
    straggler named is still the run's; it is marked only when it runs on this host). The last one is kept: every
    view that draws the same frame (both timelines) gets the same slice, made once."""
    key = (snap.run_id, snap.version, snap.now_s, host)
    if key in _last_focus:
        return _last_focus[key]
    rows = rows_of(snap, host)
    sliced: dict[str, Any] = {name: readonly(getattr(snap, name)[rows]) for name in _PER_RANK}
    focused = dataclasses.replace(snap, **sliced, hosts=tuple(snap.hosts[i] for i in rows.tolist()),
                                  state=tuple(snap.state[i] for i in rows.tolist()))
    _last_focus.clear()
    _last_focus[key] = focused
    return focused


def host_means(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per-run means of the rows of ``values`` (ranks x columns) over the values that exist (NaN where a run has
    none in a column). ``starts``: the first row of each run (``HostRuns.starts``)."""
    if not starts.size:
        return np.zeros((0, values.shape[1]))
    finite = np.isfinite(values)
    sums = np.add.reduceat(np.where(finite, values, 0.0), starts, axis=0)
    counts = np.add.reduceat(finite.astype(np.int32), starts, axis=0)
    with np.errstate(all="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def fold_rows(image: np.ndarray, height: int, reference: np.ndarray, blank: int = 255) -> np.ndarray:
    """``image`` (rows x columns of colour indices, ``blank`` = no data) folded to at most ``height`` rows for
    drawing: each drawn row is, per column, the most unusual row of its block (the farthest from ``reference``, the
    column's typical index), so one bad host among hundreds still shows when there are more rows than pixels,
    where sampling every n-th row would drop it. Blank only where the whole block has no data."""
    rows, cols = image.shape
    if height <= 0 or rows <= height:
        return image
    block = -(-rows // height)
    data = np.where(image == blank, -1, image.astype(np.int16))
    pad = -rows % block
    if pad:
        data = np.vstack((data, np.full((pad, cols), -1, np.int16)))
    data = data.reshape(-1, block, cols)
    distance = np.where(data >= 0, np.abs(data - reference.astype(np.int16)[None, None, :]), -1)
    picked = np.take_along_axis(data, distance.argmax(axis=1)[:, None, :], axis=1)[:, 0, :]
    return np.where(picked < 0, blank, picked).astype(np.uint8)
