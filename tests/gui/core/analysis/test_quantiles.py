"""Medians and percentiles over what was measured (``ringscope.gui.core.analysis.quantiles``): NaN is a missing
reading, and nothing measured is None (or NaN), never 0."""

from __future__ import annotations

import numpy as np
import pytest

from ringscope.gui.core.analysis.quantiles import column_percentiles, finite_percentiles, median_or_none


def test_the_median_skips_missing_readings_and_is_none_without_any() -> None:
    assert median_or_none([3.0, np.nan, 1.0, 2.0]) == 2.0
    assert median_or_none(np.array([np.nan, np.nan])) is None and median_or_none([]) is None


def test_percentiles_of_one_set_ignore_what_is_not_finite() -> None:
    values = np.array([np.nan, np.inf, *range(101)], dtype=np.float64)
    assert finite_percentiles(values, (0.05, 0.5, 0.95)) == pytest.approx([5.0, 50.0, 95.0])
    assert finite_percentiles(np.array([np.nan, -np.inf]), (0.5,)) is None


def test_column_percentiles_take_the_nearest_measured_rank_and_an_empty_column_is_nan() -> None:
    rng = np.random.default_rng(7)
    values = rng.random((64, 30))
    values[rng.random(values.shape) < 0.2] = np.nan
    values[:, 3] = np.nan
    bands = column_percentiles(values, (0.05, 0.5, 0.95))
    assert bands.shape == (3, 30) and np.isnan(bands[:, 3]).all()
    for column in (0, 17):
        measured = np.sort(values[:, column][~np.isnan(values[:, column])])
        nearest = [measured[int(np.floor(q * (len(measured) - 1) + 0.5))] for q in (0.05, 0.5, 0.95)]
        np.testing.assert_array_equal(bands[:, column], nearest)
    assert column_percentiles(np.zeros((0, 5)), (0.5,)).shape == (1, 5)
