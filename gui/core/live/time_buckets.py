"""The live store's time-bucket ring: per-rank phase sums over run time (ranks x buckets), what the heat maps and the
stacked cluster columns draw.

What it owns: the ring of bucket sums (``n``, step and phase seconds, how many steps reported each phase; stored
bucket-major, see ``TimeBuckets.sums``), which
absolute bucket each column holds, the per-column derived figures (heat matrices: each rank's data-wait and exposed
communication share; the cluster's mean step and phases) kept up to date column by column, and one stamp per column
that changes whenever the column does, so a view redoes only those. When a run outgrows the ring the bucket width
doubles and neighbouring buckets merge (``MAX_BUCKET_S`` at most), so the ring always covers the whole run.

Locking: no lock of its own. Every method is called with the owning ``LiveStore``'s ``_lock`` held (``load`` with
the steps handed over since the last reader, or a recording's; ``refresh`` / ``frame`` from a snapshot copy).

What it must never do: import Qt, grow with time (its size is ranks x buckets), or write 0 where nothing was
measured (an empty bucket is NaN in the derived figures).
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from ringscope.gui.core.live.snapshot import PHASES
from ringscope.gui.core.session_data import Columns

HEAT: Final = ("data_wait_s", "comm_exposed_s")
"""The per-rank shares the views show as heat maps."""
_SUMS: Final = ("n", "step_s", "data_wait_s", "compute_s", "comm_exposed_s",
                "n_data_wait_s", "n_compute_s", "n_comm_exposed_s")
_MEASURED: Final = ("data_wait_s", "compute_s", "comm_exposed_s")  # phases a step may leave unreported
MAX_BUCKET_S: Final[float] = 4096.0
"""Widest bucket a run's history is merged into; beyond that the oldest buckets leave the ring (weeks-long runs)."""


class TimeBuckets:
    """Ranks x ``buckets`` ring of per-bucket sums, ``bucket_s`` seconds wide at the start of a run (it doubles as
    the run outgrows the ring). Rows are the store's rank rows; ``grow`` follows the store's row capacity."""

    def __init__(self, buckets: int, bucket_s: float) -> None:
        self.T = buckets
        self.bucket_s = float(bucket_s)
        self.rows = 0  # rows in use: the first ``rows`` of every matrix (``use``); the others are only reserved
        # Bucket-major (buckets x rank rows): a bucket's sums over every rank are one contiguous row, so the pages a
        # new bucket writes are that bucket's alone. Rank-major, the first step of every rank wrote to a page of
        # every rank's row: at 8 192 ranks all 150 MB of sums were mapped in the second the run started (0.9 s of
        # page faults on the collector thread on this project's VMs); now they are mapped one bucket a second.
        self.sums: dict[str, np.ndarray] = {name: np.zeros((buckets, 0), np.float32) for name in _SUMS}
        # Derived per-cell figures (mean step, phase shares) are kept up to date column by column: only the
        # columns written since the last snapshot are recomputed, so a frame costs O(ranks), not O(ranks x T).
        self.heat: dict[str, np.ndarray] = {name: np.full((0, buckets), np.nan, np.float32) for name in HEAT}
        self.cluster: dict[str, np.ndarray] = {name: np.full(buckets, np.nan) for name in ("step", *PHASES)}
        self.dirty_cols: set[int] = set()
        # Each column's contents get a new stamp whenever they change, so a view can redo only those columns.
        self.col_stamp = np.zeros(buckets, np.int64)
        self._stamp = 0
        self.col_abs = np.full(buckets, -1, np.int64)  # which absolute bucket each column holds
        self.head_abs = -1
        self.first_abs = -1  # the run's earliest bucket that holds a step (-1 before the first)
        self.samples = np.zeros(buckets)
        self.steps = np.zeros(buckets)
        # per column: its heat is NaN in every row in use (nothing measured since it was last emptied), so emptying
        # it again writes nothing
        self.blank = np.ones(buckets, bool)

    def grow(self, cap: int) -> None:
        """Room for ``cap`` rank rows. The new rows are only reserved (zeroed memory the kernel maps when first
        written): heat rows cost memory once ``use`` takes them, sums as buckets are written, and growing copies only
        the rows in use of the buckets in use. Filling the new rows at once cost 45 % of the ingest process while
        8 192 ranks joined."""
        def grown(array: np.ndarray) -> np.ndarray:
            out = np.zeros((cap, self.T), dtype=array.dtype)
            out[: self.rows] = array[: self.rows]
            return out

        used = np.flatnonzero(self.col_abs >= 0)  # a bucket never used is 0 (see _advance): nothing to copy

        def grown_t(array: np.ndarray) -> np.ndarray:  # bucket-major
            out = np.zeros((self.T, cap), dtype=array.dtype)
            out[used, : self.rows] = array[used, : self.rows]
            return out

        self.sums = {name: grown_t(a) for name, a in self.sums.items()}
        self.heat = {name: grown(a) for name, a in self.heat.items()}

    def use(self, rows: int) -> None:
        """The first ``rows`` rows are in use; a row taken now has nothing measured yet (sums 0, shares NaN)."""
        if rows > self.rows:
            for array in self.heat.values():
                array[self.rows:rows] = np.nan
            self.rows = rows

    # ---- Writing (collector thread, or a bulk reload) --------------------------------------------------------------

    def widen_to(self, span_s: float) -> None:
        """Before a ring that has no step yet takes its first: double the bucket width until ``span_s`` seconds
        fit."""
        if self.first_abs < 0:
            while span_s / self.bucket_s >= self.T - 1 and self.bucket_s * 2 <= MAX_BUCKET_S:
                self.bucket_s *= 2

    def load(self, rows: np.ndarray, end: np.ndarray, cols: Columns) -> int:
        """Add many steps of rank rows ``rows`` at once (vectorized; any order); returns how many were older than
        the kept history (not added). A run that outgrows the ring first has its buckets merged (the width
        doubles), so it is kept whole."""
        if not rows.size:
            return 0
        if self.first_abs < 0:
            self.widen_to(float(end.max() - end.min()))
        while (self.first_abs >= 0 and math.floor(float(end.max()) / self.bucket_s) - self.first_abs >= self.T
               and self.bucket_s * 2 <= MAX_BUCKET_S):
            self._merge()  # the run outgrew the ring: halve the resolution, keep the whole run
        b = np.floor(end / self.bucket_s).astype(np.int64)
        head = int(b.max())
        if head > self.head_abs:
            self.dirty_cols.update(self._advance(head).tolist())
        col = b % self.T
        kept = self.col_abs[col] == b
        late = int((~kept).sum())
        rows, col, b = rows[kept], col[kept], b[kept]
        if not rows.size:
            return late
        self.first_abs = int(b.min()) if self.first_abs < 0 else min(self.first_abs, int(b.min()))
        # each (bucket, rank) cell once, its steps summed by bincount: np.add.at cost a quarter of a frame's pass
        # over 2 000 steps at 8 192 ranks
        width = int(rows.max()) + 1
        cells, at = np.unique(col * width + rows, return_inverse=True)
        cell_col, cell_row = np.divmod(cells, width)
        sums = self.sums

        def add(name: str, weights: np.ndarray | None) -> None:
            sums[name][cell_col, cell_row] += np.bincount(at, weights=weights, minlength=cells.size)

        add("n", None)
        add("step_s", cols["step_s"][kept].astype(np.float64))
        for name in _MEASURED:
            values = cols[name][kept].astype(np.float64)
            have = ~np.isnan(values)
            add(name, np.where(have, values, 0.0))
            add("n_" + name, have.astype(np.float64))
        self.steps += np.bincount(col, minlength=self.T)
        samples = cols["samples"][kept].astype(np.float64)
        have = ~np.isnan(samples)
        self.samples += np.bincount(col[have], weights=samples[have], minlength=self.T)
        self.dirty_cols.update(np.unique(col).tolist())
        return late

    def _advance(self, head: int) -> np.ndarray:
        """Move the ring's head to absolute bucket ``head``: the columns it passes are emptied and returned."""
        first = max(self.head_abs + 1, head - self.T + 1)
        cols = np.arange(first, head + 1) % self.T
        used = cols[self.col_abs[cols] >= 0]  # a column that never held a bucket is still 0 (the first advance
        for array in self.sums.values():      # passes all of them: zeroing them would map every page at once)
            array[used, :self.rows] = 0.0  # rows not in use were never written: still 0
        self.samples[cols] = 0.0
        self.steps[cols] = 0.0
        self.col_abs[cols] = np.arange(first, head + 1)
        self.head_abs = head
        return cols

    def _merge(self) -> None:
        """Double the bucket width: bucket ``a`` of the old width becomes bucket ``a // 2`` of the new one."""
        valid = np.flatnonzero(self.col_abs >= 0)
        new_cols = (self.col_abs[valid] // 2) % self.T
        rows = self.rows
        for name, array in self.sums.items():
            merged = np.zeros(array.shape, array.dtype)  # (not zeros_like: it writes every page, reserved rows too)
            np.add.at(merged[:, :rows], new_cols, array[valid, :rows])
            self.sums[name] = merged
        for name in ("samples", "steps"):
            old = getattr(self, name)
            merged = np.zeros_like(old)
            np.add.at(merged, new_cols, old[valid])
            setattr(self, name, merged)
        self.head_abs //= 2
        # the ring holds the T buckets up to the head, as after any advance (the ones before the run stay empty)
        self.col_abs = np.full(self.T, -1, np.int64)
        window = np.arange(self.head_abs - self.T + 1, self.head_abs + 1)
        self.col_abs[window % self.T] = window
        self.first_abs //= 2
        self.bucket_s *= 2
        for array in self.heat.values():
            array[:rows] = np.nan
        self.blank[:] = True
        for array in self.cluster.values():
            array[:] = np.nan
        self.dirty_cols.update(range(self.T))  # every column moved: the views redraw them all

    # ---- Reading (a snapshot copy) ---------------------------------------------------------------------------------

    def refresh(self, n: int) -> None:
        """Recompute the derived figures of the columns written since the last call (the first ``n`` rows)."""
        if not self.dirty_cols:
            return
        cols = np.fromiter(self.dirty_cols, np.int64)
        self.dirty_cols.clear()
        self.col_stamp[cols] = self._stamp + 1 + np.arange(cols.size)  # one stamp per column: never shared
        self._stamp += cols.size
        # A column without a step (the ring's advance emptied it) is NaN in every row: no sums to read. The ring's
        # first advance passes all of its columns; reading their sums (8 matrices of zero pages, 157 MB at 8 192
        # ranks) cost ~0.1 s of the run's first frame.
        empty = self.steps[cols] == 0
        if empty.any():
            emptied = cols[empty]
            held = emptied[~self.blank[emptied]]
            if held.size:
                for array in self.heat.values():
                    array[:n, held] = np.nan
            self.blank[emptied] = True
            for array in self.cluster.values():
                array[emptied] = np.nan
            cols = cols[~empty]
            if not cols.size:
                return
        self.blank[cols] = False
        sums = {name: a[cols, :n] for name, a in self.sums.items()}  # columns x rows
        with np.errstate(all="ignore"):
            step_mean = sums["step_s"] / sums["n"]
            for name in HEAT:
                self.heat[name][:n, cols] = ((sums[name] / sums["n_" + name]) / step_mean).T
            cluster = self.cluster
            cluster["step"][cols] = sums["step_s"].sum(1) / sums["n"].sum(1)
            for name, phase in (("data_wait_s", "data_wait"), ("compute_s", "compute"),
                                ("comm_exposed_s", "comm_exposed")):
                cluster[phase][cols] = sums[name].sum(1) / sums["n_" + name].sum(1)
            cluster["other"][cols] = np.maximum(cluster["step"][cols] - cluster["data_wait"][cols]
                                                - cluster["compute"][cols] - cluster["comm_exposed"][cols], 0.0)

    @property
    def split(self) -> int:
        """The column of the oldest bucket (the ring's columns from here on, then from 0, are oldest first)."""
        return (self.head_abs + 1) % self.T

    def frame(self) -> dict[str, Any]:
        """Copies of the per-bucket series for a frame, oldest bucket first."""
        cols = (np.arange(self.T) + self.head_abs + 1) % self.T
        return {"cluster": {name: a[cols] for name, a in self.cluster.items()},
                "bucket_abs": self.col_abs[cols].copy(), "bucket_stamp": self.col_stamp[cols],
                "bucket_samples": self.samples[cols].copy(), "bucket_steps": self.steps[cols].copy(),
                "bucket_s": self.bucket_s}
