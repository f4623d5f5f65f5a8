"""Recycled frame copies of the live store's heat matrices (ranks x buckets, oldest bucket first).

Why: a fresh 1 MB frame copy costs ~300 page faults (~1 ms each matrix, 4 a frame). A snapshot that nobody holds any
more gives its buffers back: a pooled buffer is written again only when no snapshot, and no array a view sliced from
one, refers to it (its reference count says so). A buffer remembers what it was filled from (the ring's rotation,
the rows and each column's stamp, see ``TimeBuckets.col_stamp``): while the rows and the rotation are the same,
refilling it copies only the columns whose stamp changed since, a few of 600 (8 192 ranks: the two matrices' copy
was ~16 ms of a frame's ~40, now ~0.5 ms in all but the one frame a second whose bucket rotates the ring).

Locking: no lock of its own; ``copy`` is called with the owning ``LiveStore``'s ``_lock`` held.

What it must never do: write into a buffer that a snapshot still holds, or keep more than ``POOLED`` buffers per
matrix.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

POOLED: Final[int] = 8
"""Recycled frame copies per heat matrix: the window keeps ~6 snapshots alive (views, cache)."""


@dataclass(slots=True)
class _Filled:
    """What a pooled buffer holds: the ring's rotation, how many rows and the stamp of each ring column when it was
    copied. (The same number of rows is the same rows in the same order: a store's rows only ever grow, and the rank
    of a row never changes.)"""

    split: int
    n: int
    stamps: np.ndarray


class HeatPool:
    """Frame copies of the named ``buckets``-column matrices, in recycled buffers."""

    def __init__(self, names: Iterable[str], buckets: int) -> None:
        self._buckets = buckets
        self._pool: dict[str, list[np.ndarray]] = {name: [] for name in names}
        self._filled: dict[str, list[_Filled | None]] = {name: [] for name in names}  # per pooled buffer

    def copy(self, name: str, source: np.ndarray, rows: slice | np.ndarray, n: int, split: int,
             stamps: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (``n`` of them) of the ring ``source``, columns rotated oldest first (``split``: the
        oldest column), in a buffer no snapshot holds. ``stamps``: each ring column's stamp, which changes whenever
        the column does (only the columns whose stamp moved since the buffer was filled are copied again)."""
        out, slot = self._buffer(name, n)
        order = None if isinstance(rows, slice) else rows
        held = self._filled[name][slot] if slot >= 0 else None
        if held is not None and held.split == split and held.n == n:
            changed = np.flatnonzero(held.stamps != stamps)
            if changed.size:
                picked = source[:n, changed] if order is None else source[order[:, None], changed[None, :]]
                out[:, (changed - split) % self._buckets] = picked
        else:
            # ranks that did not arrive in order (thousands of agents joining at once): one gather, then the
            # rotation's two slice copies (8 ms at 8 192 x 600, where gather, concatenate and copy took 15)
            oldest_first(source[rows] if order is None else source.take(order, axis=0), split, out)
        if slot >= 0:
            self._filled[name][slot] = _Filled(split, n, stamps.copy())
        return out

    def _buffer(self, name: str, n: int) -> tuple[np.ndarray, int]:
        """A buffer of ``n`` rows no snapshot holds, and its place in the pool (-1: not pooled)."""
        pool, filled = self._pool[name], self._filled[name]
        for i in range(len(pool)):
            buffer = pool[i]
            # 3 references: the pool's list, this variable, getrefcount's argument. Any snapshot, or any array a
            # view sliced from it, holds one more: such a buffer is never written again.
            if sys.getrefcount(buffer) == 3:
                if buffer.shape[0] != n:
                    pool[i] = buffer = np.empty((n, self._buckets), np.float32)
                    filled[i] = None
                buffer.setflags(write=True)  # it owns its memory: a snapshot only made it read-only
                return buffer, i
        buffer = np.empty((n, self._buckets), np.float32)
        if len(pool) < POOLED:
            pool.append(buffer)
            filled.append(None)
            return buffer, len(pool) - 1
        return buffer, -1


def oldest_first(matrix: np.ndarray, split: int, out: np.ndarray | None = None) -> np.ndarray:
    """A ranks x buckets ring with its columns rotated oldest-first (two slice copies: no fancy indexing), into
    ``out`` when given, else a new array."""
    if out is None:
        out = np.empty_like(matrix)
    tail = matrix.shape[1] - split
    out[:, :tail] = matrix[:, split:]
    out[:, tail:] = matrix[:, :split]
    return out
