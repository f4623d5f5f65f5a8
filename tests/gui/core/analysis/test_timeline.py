"""The timeline's throughput: steady steps read as a flat line, whatever the bucket size."""

from __future__ import annotations

import numpy as np
import pytest

from ringscope.gui.core.analysis.summary import analyze
from tests.gui.core.analysis.test_analysis import SAMPLES, make_session


@pytest.mark.parametrize("bucket_s", [0.1, 0.25, 1.0])
def test_throughput_is_flat_on_steady_steps(bucket_s: float) -> None:
    # ~76 ms steps: a bucket holds a fractional number of steps, so counting whole steps per bucket made spikes.
    analysis = analyze(make_session(ranks=4, steps=400), bucket_s=bucket_s)
    t = analysis.timeline
    steady = t.throughput[(t.start_s > 1.0) & (t.start_s + bucket_s < analysis.duration_s - bucket_s)]
    assert len(steady) >= 10
    assert np.isfinite(steady).all()
    assert steady.max() / steady.min() < 1.03, steady
    assert np.median(steady) == pytest.approx(analysis.throughput, rel=0.02)
    step_s = analysis.overall.step_s
    assert np.median(steady) == pytest.approx(4 * SAMPLES / step_s, rel=0.02)  # samples over step time


def test_throughput_has_gaps_where_no_step_ran() -> None:
    session = make_session(ranks=2, steps=100)
    steps = session.steps
    late = steps["step"] >= 50
    for column in ("start_s", "end_s"):
        steps[column] = np.where(late, steps[column] + 30.0, steps[column])  # a 30 s pause with no steps
    t = analyze(session, bucket_s=1.0).timeline
    t0 = steps["start_s"].min()
    middle = (t.start_s > steps["end_s"][~late].max() - t0 + 1) & (t.start_s + 1 < steps["start_s"][late].min() - t0)
    assert middle.sum() >= 25 and np.isnan(t.throughput[middle]).all()
