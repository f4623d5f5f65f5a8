"""Recommendations speak for all GPUs together: "7 of 8 GPUs ~45 % busy", not one GPU named as if alone."""

from __future__ import annotations

import numpy as np

from ringscope.gui.core.analysis.cost import estimate_cost
from ringscope.gui.core.analysis.recommendations import recommend
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.session_data import SessionData
from tests.gui.core.analysis.test_analysis import make_session


def _with_utilization(busy: dict[int, float]) -> SessionData:
    """An 8-rank session whose GPU of rank r reports ``busy[r]`` % (±1), the others 92 %."""
    session = make_session(ranks=8, steps=60)
    gpu = session.gpu
    rng = np.random.default_rng(1)
    ranks = gpu["rank"].astype(int)
    target = np.array([busy.get(r, 92.0) for r in ranks])
    gpu["util_pct"] = target + rng.uniform(-1, 1, len(target))
    return session


def _recommendations(session: SessionData) -> dict[str, object]:
    analysis = analyze(session)
    return {r.key: r for r in recommend(analysis, estimate_cost(analysis, session, 2.0))}


def test_seven_of_eight_idle_gpus_make_one_aggregate_recommendation() -> None:
    recs = _recommendations(_with_utilization(dict.fromkeys(range(7), 45.0)))
    low = recs["low_gpu_util"]
    assert low.title == "7 of 8 GPUs ~45 % busy"  # type: ignore[attr-defined]
    assert "sim-node" not in low.title and "node0:0 is" not in low.title  # type: ignore[attr-defined]
    assert 44 <= low.value <= 46  # type: ignore[attr-defined]
    assert "7 idle GPUs" in low.evidence  # type: ignore[attr-defined]


def test_one_idle_gpu_among_busy_ones_is_named() -> None:
    low = _recommendations(_with_utilization({3: 30.0}))["low_gpu_util"]
    assert low.title.startswith("GPU node3:0 is mostly idle (30 % busy)")  # type: ignore[attr-defined]
    assert "other 7 are busier" in low.title  # type: ignore[attr-defined]


def test_busy_gpus_recommend_nothing_about_utilization() -> None:
    assert "low_gpu_util" not in _recommendations(_with_utilization({}))
