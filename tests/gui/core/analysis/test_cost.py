"""Cost model and recommendations against sessions with known injected delays."""

from __future__ import annotations

import numpy as np
import pytest

from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR, estimate_cost, resolve_price, waste_by_rank
from ringscope.gui.core.analysis.recommendations import THRESHOLDS, recommend
from ringscope.gui.core.analysis.summary import analyze
from tests.gui.core.analysis.test_analysis import ALLREDUCE_S, DATA_S, FIRST_BATCH_WAIT_S, OTHER_S, make_session


def test_cost_so_far_and_waste_split_match_injected_delays() -> None:
    ranks, steps, extra = 4, 100, 0.030
    session = make_session(ranks=ranks, steps=steps, straggler=1, extra_compute_s=extra)
    a = analyze(session)
    cost = estimate_cost(a, session, price_per_gpu_hour=3.0)
    assert cost.unit == "GPU-hours" and cost.devices == 4
    assert cost.cost_total == pytest.approx(ranks * a.duration_s / 3600 * 3.0)
    # Per step: 3 fast ranks wait allreduce + extra, the slow one waits allreduce only.
    stall_rank_s = steps * (ranks * ALLREDUCE_S + (ranks - 1) * extra)
    assert cost.waste_hours["allreduce_stall"] == pytest.approx(stall_rank_s / 3600, rel=0.02)
    data_rank_s = ranks * ((steps - 1) * DATA_S + FIRST_BATCH_WAIT_S)
    assert cost.waste_hours["data_loader_idle"] == pytest.approx(data_rank_s / 3600, rel=0.01)
    assert cost.waste_hours["other"] == pytest.approx(ranks * steps * OTHER_S / 3600, rel=0.01)
    assert cost.waste_cost["allreduce_stall"] == pytest.approx(cost.waste_hours["allreduce_stall"] * 3.0)
    assert 0 < cost.waste_share < 1
    assert sum(waste_by_rank(session).values()) / 3600 == pytest.approx(sum(cost.waste_hours.values()))


def test_cpu_only_run_is_priced_in_rank_hours_and_says_so() -> None:
    session = make_session(ranks=3, gpu=False)
    cost = estimate_cost(analyze(session), session)
    assert cost.unit == "rank-hours"
    assert "no GPU" in cost.assumption and "rank-hours" in cost.assumption
    assert cost.devices == 3
    assert cost.price_source == "default" and cost.price_per_gpu_hour == DEFAULT_PRICE_PER_GPU_HOUR


def test_price_comes_from_argument_then_agent_then_default() -> None:
    session = make_session(ranks=2, steps=10, price=4.2)
    assert resolve_price(None, session) == (4.2, "agent")
    assert resolve_price(1.0, session) == (1.0, "argument")
    assert resolve_price(None, make_session(ranks=2, steps=10)) == (DEFAULT_PRICE_PER_GPU_HOUR, "default")
    with pytest.raises(ValueError, match="got -1"):
        resolve_price(-1.0, session)


def test_work_at_risk_since_last_checkpoint_or_whole_session() -> None:
    session = make_session(ranks=4, steps=100, checkpoint_every=40)
    a = analyze(session)
    cost = estimate_cost(a, session, 2.0)
    assert a.checkpoints_s
    assert cost.at_risk_hours == pytest.approx(4 * (a.end_s - a.checkpoints_s[-1]) / 3600)
    assert cost.at_risk_cost == pytest.approx(cost.at_risk_hours * 2.0)
    assert "since the last checkpoint" in cost.at_risk_reason
    bare = make_session(ranks=4, steps=100)
    bare_cost = estimate_cost(analyze(bare), bare, 2.0)
    assert bare_cost.at_risk_hours == pytest.approx(bare_cost.device_hours)
    assert "no checkpoint" in bare_cost.at_risk_reason
    live = estimate_cost(a, session, 2.0, now_s=a.end_s + 3600)
    assert live.cost_total == pytest.approx(cost.cost_total + 4 * 2.0)


def test_recommendations_carry_their_figure_and_threshold() -> None:
    input_bound = make_session(ranks=4, straggler=0, extra_data_s=0.0)
    # Make every rank wait for data: a session whose data share is far above the 20 % threshold.
    input_bound.steps["data_wait_s"] += 0.05
    input_bound.steps["step_s"] += 0.05
    a = analyze(input_bound)
    recs = {r.key: r for r in recommend(a, estimate_cost(a, input_bound))}
    assert "input_bound" in recs
    rec = recs["input_bound"]
    assert rec.value == pytest.approx(a.overall.shares["data_wait"])
    assert rec.value >= THRESHOLDS["input_bound"].limit
    assert "% of step time" in rec.evidence and "threshold 20.0 %" in rec.evidence
    assert "workers" in rec.advice

    straggling = make_session(ranks=4, straggler=3, extra_compute_s=0.04, throttle=True)
    a = analyze(straggling)
    recs = {r.key: r for r in recommend(a, estimate_cost(a, straggling))}
    assert recs["straggler"].title == "Rank 3 is a straggler"
    assert recs["straggler"].value == pytest.approx(a.straggler.gap_share)  # type: ignore[union-attr]
    assert "low_gpu_util" not in recs  # 60 % median is above the 50 % threshold

    network = make_session(ranks=4, allreduce_s=0.06)
    a = analyze(network)
    recs = {r.key: r for r in recommend(a, estimate_cost(a, network))}
    assert "comm_bound" in recs and "compression" in recs["comm_bound"].advice


def test_healthy_run_gets_no_recommendation() -> None:
    session = make_session(ranks=4, allreduce_s=0.005)
    a = analyze(session)
    assert recommend(a, estimate_cost(a, session)) == []


def test_long_run_without_checkpoint_on_many_gpus_puts_money_at_risk() -> None:
    session = make_session(ranks=8, steps=20)
    # Stretch the session to 3 hours: same steps, spread out in time.
    session.steps["start_s"] = session.steps["start_s"] + np.where(session.steps["step"] >= 10, 3 * 3600, 0)
    session.steps["end_s"] = session.steps["end_s"] + np.where(session.steps["step"] >= 10, 3 * 3600, 0)
    a = analyze(session)
    cost = estimate_cost(a, session, 2.0)
    recs = {r.key: r for r in recommend(a, cost)}
    assert "checkpoint_risk" in recs
    assert recs["checkpoint_risk"].title.startswith(f"${cost.at_risk_cost:,.0f}")
    assert recs["checkpoint_risk"].value == pytest.approx(a.duration_s / 3600)
