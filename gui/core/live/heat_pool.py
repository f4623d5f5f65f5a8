"""Recycled frame copies of the live store's heat matrices (ranks x buckets, oldest bucket first).

Why: a fresh 1 MB frame copy costs ~300 page faults (~1 ms each matrix, 4 a frame). A snapshot that nobody holds any
more gives its buffers back: a pooled buffer is written again only when no snapshot, and no array a view sliced from
one, refers to it (its reference count says so).

Locking: no lock of its own; ``copy`` is called with the owning ``LiveStore``'s ``_lock`` held.

What it must never do: write into a buffer that a snapshot still holds, or keep more than ``POOLED`` buffers per
matrix.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Final

import numpy as np

POOLED: Final[int] = 8
"""Recycled frame copies per heat matrix: the window keeps ~6 snapshots alive (views, cache)."""


class HeatPool:
    """Frame copies of the named ``buckets``-column matrices, in recycled buffers."""

    def __init__(self, names: Iterable[str], buckets: int) -> None:
        self._buckets = buckets
        self._pool: dict[str, list[np.ndarray]] = {name: [] for name in names}

    def copy(self, name: str, source: np.ndarray, rows: slice | np.ndarray, n: int, split: int) -> np.ndarray:
        """Rows ``rows`` (``n`` of them) of the ring ``source``, columns rotated oldest first (``split``: the
        oldest column), in a buffer no snapshot holds."""
        out = self._buffer(name, n)
        # ranks that did not arrive in order (thousands of agents joining at once): one gather, then the rotation's
        # two slice copies (8 ms at 8 192 x 600, where gather, concatenate and copy took 15)
        return oldest_first(source[rows] if isinstance(rows, slice) else source.take(rows, axis=0), split, out)

    def _buffer(self, name: str, n: int) -> np.ndarray:
        pool = self._pool[name]
        for i in range(len(pool)):
            buffer = pool[i]
            # 3 references: the pool's list, this variable, getrefcount's argument. Any snapshot, or any array a
            # view sliced from it, holds one more: such a buffer is never written again.
            if sys.getrefcount(buffer) == 3:
                if buffer.shape[0] != n:
                    pool[i] = buffer = np.empty((n, self._buckets), np.float32)
                buffer.setflags(write=True)  # it owns its memory: a snapshot only made it read-only
                return buffer
        buffer = np.empty((n, self._buckets), np.float32)
        if len(pool) < POOLED:
            pool.append(buffer)
        return buffer


def oldest_first(matrix: np.ndarray, split: int, out: np.ndarray | None = None) -> np.ndarray:
    """A ranks x buckets ring with its columns rotated oldest-first (two slice copies: no fancy indexing), into
    ``out`` when given, else a new array."""
    if out is None:
        out = np.empty_like(matrix)
    tail = matrix.shape[1] - split
    out[:, :tail] = matrix[:, split:]
    out[:, tail:] = matrix[:, :split]
    return out
