"""The heat maps' colour indices, has-data flags and p5/p50/p95 per bucket, kept between frames (Qt-free).

A heat map at 1 024 ranks is 300 k cells; between two frames about one column of them changes. ``HeatColumns``
recomputes only the columns whose stamp (``Snapshot.bucket_stamp``) is new, and folds only those again when the
image has more rows than pixels. ``QtRankTimeline`` draws from it.
"""

from __future__ import annotations

import numpy as np

from ringscope.gui.core.analysis.quantiles import column_percentiles
from ringscope.gui.core.live.host_view import fold_rows, host_means
from ringscope.gui.core.live.store import Snapshot

__all__ = ["HeatColumns"]


class HeatColumns:
    """The heatmap's colour indices, has-data flags and p5/p50/p95 per bucket, kept between frames.

    A column is recomputed only when its stamp is new (``Snapshot.bucket_stamp``) or the ranks changed; the
    others are carried over, moved to their new place when the time axis advances.
    """

    def __init__(self) -> None:
        self.ranks = np.zeros(0, np.int64)
        self.stamps = np.zeros(0, np.int64)
        self.groups: np.ndarray | None = None  # first row of each host when the image has a row per host
        self.image = np.zeros((0, 0), np.uint8)  # index 255 = no data (the LUT's last colour)
        self.has_data = np.zeros(0, bool)
        self.percentiles = np.zeros((3, 0))
        self._folded = np.zeros((0, 0), np.uint8)  # ``image`` folded to ``_fold_height`` rows (fold_rows)
        self._fold_height = -1
        self._fold_todo: np.ndarray | None = None  # columns to fold again; None: all of them

    def folded(self, height: int) -> np.ndarray:
        """``image`` folded to at most ``height`` rows (``fold_rows``, around each column's median over ranks);
        only the columns recomputed since the last call are folded again."""
        if self.image.shape[0] <= height or height <= 0:
            return self.image
        typical = np.rint(np.nan_to_num(self.percentiles[1], nan=0.0) * 2.54)
        if self._fold_todo is None or height != self._fold_height or self._folded.shape[1] != self.image.shape[1]:
            self._folded, self._fold_height = fold_rows(self.image, height, typical), height
        elif self._fold_todo.size:
            todo = self._fold_todo
            self._folded[:, todo] = fold_rows(self.image[:, todo], height, typical[todo])
        self._fold_todo = np.zeros(0, np.int64)
        return self._folded

    def update(self, snap: Snapshot, shares: np.ndarray, groups: np.ndarray | None = None) -> HeatColumns:
        """The columns for ``shares`` (ranks x buckets); with ``groups`` (the first row of each host) the image has
        a row per host, the mean of its ranks, while the percentiles stay over every rank."""
        n, t = shares.shape
        rows = n if groups is None else groups.size
        stamps = snap.bucket_stamp
        same_groups = (groups is None and self.groups is None) or (
            groups is not None and self.groups is not None and np.array_equal(groups, self.groups))
        same_ranks = same_groups and self.image.shape == (rows, t) and (
            self.ranks is snap.ranks or np.array_equal(self.ranks, snap.ranks))
        if same_ranks and self.stamps.size:
            order = np.argsort(self.stamps, kind="stable")
            pos = np.minimum(np.searchsorted(self.stamps[order], stamps), t - 1)
            source = order[pos]
            kept = self.stamps[source] == stamps
        else:
            source = np.arange(t)
            kept = np.zeros(t, bool)
        if not np.array_equal(source[kept], np.flatnonzero(kept)):  # the time axis moved: carry columns along
            self.image = self.image[:, source]
            self.has_data = self.has_data[source]
            self.percentiles = self.percentiles[:, source]
            if self._folded.shape[1] == t:
                self._folded = self._folded[:, source]
        elif not same_ranks:
            self.image = np.empty((rows, t), np.uint8)
            self.has_data = np.zeros(t, bool)
            self.percentiles = np.full((3, t), np.nan)
        todo = np.flatnonzero(~kept)
        if not same_ranks:
            self._fold_todo = None
        elif self._fold_todo is not None:
            self._fold_todo = np.union1d(self._fold_todo, todo)
        if todo.size:
            values = 100.0 * shares[:, todo].astype(np.float64)
            shown = values if groups is None else host_means(values, groups)
            finite = np.isfinite(shown)
            with np.errstate(invalid="ignore"):
                scaled = np.clip(np.rint(shown * 2.54), 0, 254)
            self.image[:, todo] = np.where(finite, scaled, 255).astype(np.uint8)
            self.has_data[todo] = finite.any(axis=0)
            self.percentiles[:, todo] = column_percentiles(values, (0.05, 0.5, 0.95))
        self.ranks, self.stamps, self.groups = snap.ranks, stamps, groups
        return self
