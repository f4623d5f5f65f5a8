"""Medians and percentiles as every part of the core takes them: over the values that were measured (NaN is a
missing reading, never a number), and ``None`` (or NaN in an array) where nothing was measured, never 0.

``column_percentiles`` is the fast one for the window's bands (ranks x time: per-rank stall and step bands, the
GPUs' utilization band); ``finite_percentiles`` and ``median_or_none`` are for one set of values. Must never import
Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike


def median_or_none(values: ArrayLike) -> float | None:
    """The median of the values that are not NaN; None when there are none."""
    array = np.asarray(values, dtype=np.float64)
    array = array[~np.isnan(array)]
    return float(np.median(array)) if len(array) else None


def finite_percentiles(values: np.ndarray, quantiles: Sequence[float]) -> list[float] | None:
    """The ``quantiles`` (0..1) of the finite values (linear interpolation, as ``np.percentile``); None when there
    are none."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    return [float(point) for point in np.percentile(finite, [100 * q for q in quantiles])]


def column_percentiles(values: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Per-column quantiles of a rows x time matrix ignoring NaN (NaN where a column is empty).

    Sorting once and indexing is ~10x faster than ``np.nanpercentile`` on 1024 x 300.
    """
    if values.size == 0:
        return np.full((len(quantiles), values.shape[1] if values.ndim == 2 else 0), np.nan)
    ordered = np.sort(values, axis=0)  # NaN sort to the end
    counts = np.sum(~np.isnan(values), axis=0)
    out = np.full((len(quantiles), values.shape[1]), np.nan)
    has = counts > 0
    cols = np.flatnonzero(has)
    for i, q in enumerate(quantiles):
        rows = np.floor(q * (counts[has] - 1) + 0.5).astype(np.int64)
        out[i, has] = ordered[rows, cols]
    return out
