"""The sweep's figures: a configuration's row from a session with known delays, the efficiency arithmetic, and the
equal-footing check on the trainers' RINGSCOPE_RESULT lines."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.sweep.analysis import FOOTING_KEYS, SweepRow, check_footing, measure, with_efficiency
from ringscope.gui.core.sweep.plan import Configuration, SweepPlan
from ringscope.gui.core.sweep.runner import RESULT_PREFIX, RunOutcome
from ringscope.trainers import common
from tests.gui.core.analysis.test_analysis import ALLREDUCE_S, COMPUTE_S, DATA_S, OTHER_S, SAMPLES, make_session

PLAN = SweepPlan(("ddp", "tf-mirrored"), (1, 2), steps=60, device="cpu")


def _footing(**changes: Any) -> dict[str, Any]:
    values = {"dataset": "digits", "model_width": 64, "model_depth": 2, "parameters": 8970,
              "batch_size_per_rank": 32, "optimizer": common.OPTIMIZER, "lr": 0.05, "seed": 0}
    return {**values, **changes}


def _outcome(framework: str, ranks: int, *, footing: dict[str, Any] | None = None, world: int | None = None,
             run_id: str = "run-d", ok: bool = True) -> RunOutcome:
    results = () if footing is None else ({"footing": footing, "world_size": world or ranks},)
    return RunOutcome(Configuration(framework, ranks), run_id, ok, (0,), 5.0, results, "" if ok else "failed: x")


def test_row_figures_are_the_session_reports_steady_state_figures() -> None:
    session = make_session(ranks=2, steps=60, gpu=False)
    row = measure(session, _outcome("ddp", 2), PLAN, price_per_gpu_hour=3.0)
    analysis = analyze(session)
    step = DATA_S + COMPUTE_S + ALLREDUCE_S + OTHER_S
    assert row.samples_per_s == analysis.throughput == pytest.approx(2 * SAMPLES / step, rel=0.01)
    assert row.global_batch == 64 and row.steps == 60 and row.status == "ok"
    assert row.compute_share == pytest.approx(COMPUTE_S / step, abs=0.01)
    assert row.allreduce_stall_share == pytest.approx(analysis.overall.shares["comm_exposed"])
    assert row.step_s == pytest.approx(step, rel=0.01)
    # 2 rank-hours per hour at $3: 1000 samples take 1000 / samples_per_s seconds
    assert row.cost_unit == "rank-hours" and row.price_per_gpu_hour == 3.0
    assert row.cost_per_1000_samples == pytest.approx(2 * 3.0 * 1000 / row.samples_per_s / 3600)
    assert row.waiting_cost == pytest.approx(row.cost_per_1000_samples * analysis.overall.idle_share)
    assert row.bytes_per_step is None  # the synthetic agent does not report bucket bytes: empty, not 0


def test_a_run_without_steps_has_no_figures_and_says_why() -> None:
    session = make_session(ranks=2, steps=60, gpu=False)
    missing = measure(session, _outcome("ddp", 1, run_id="never-ran"), PLAN)
    assert missing.samples_per_s is None and missing.status == "no steps were recorded for this run"
    failed = measure(session, _outcome("ddp", 1, run_id="never-ran", ok=False), PLAN)
    assert failed.status == "failed: x" and failed.cost_per_1000_samples is None


def test_efficiency_is_throughput_over_n_times_the_one_rank_throughput_of_the_same_framework() -> None:
    rows = with_efficiency([SweepRow("ddp", 1, "a", 32, samples_per_s=1000.0),
                            SweepRow("ddp", 2, "b", 64, samples_per_s=1500.0),
                            SweepRow("ddp", 4, "c", 128, samples_per_s=3000.0),
                            SweepRow("tf-mirrored", 1, "d", 32, samples_per_s=400.0),
                            SweepRow("tf-mirrored", 2, "e", 64, samples_per_s=800.0),
                            SweepRow("tf-multi-worker", 2, "f", 64, samples_per_s=500.0),
                            SweepRow("tf-multi-worker", 1, "g", 32, samples_per_s=None, status="failed")])
    assert [r.efficiency for r in rows] == [1.0, 0.75, 0.75, 1.0, 1.0, None, None]


def test_equal_footing_is_confirmed_by_every_result_line() -> None:
    outcomes = [_outcome("ddp", 1, footing=_footing()), _outcome("tf-mirrored", 2, footing=_footing())]
    footing = check_footing(outcomes, PLAN)
    assert footing.equal
    assert footing.text == ("Equal footing: every configuration trained digits data, an MLP of width 64 x depth 2 "
                            "(8,970 parameters), 32 samples per rank per step, SGD, momentum 0.9, lr 0.05, as each "
                            "trainer's RINGSCOPE_RESULT line confirms.")


def test_a_difference_between_runs_or_from_the_request_is_named() -> None:
    footing = check_footing([_outcome("ddp", 1, footing=_footing()),
                             _outcome("tf-mirrored", 1, footing=_footing(parameters=9000, optimizer="Adam")),
                             _outcome("tf-mirrored", 2, footing=_footing(), world=1)], PLAN)
    assert not footing.equal
    assert footing.differences == ("tf-mirrored:1: parameters 9000, not 8970 as in the first run",
                                   "tf-mirrored:1: optimizer 'Adam', not 'SGD, momentum 0.9' as in the first run",
                                   "tf-mirrored:2: the trainer ran 1 rank(s), not 2")
    assert footing.text.startswith("NOT equal footing: tf-mirrored:1: parameters 9000")
    asked_64 = check_footing([_outcome("ddp", 1, footing=_footing(batch_size_per_rank=64))], PLAN)
    assert asked_64.differences == ("ddp:1: batch_size_per_rank 64, requested 32",)


def test_a_run_without_a_result_line_is_named_and_none_at_all_is_not_equal() -> None:
    partly = check_footing([_outcome("ddp", 1, footing=_footing()), _outcome("ddp", 2)], PLAN)
    assert partly.equal and partly.text.endswith("(not confirmed for ddp:2: no RINGSCOPE_RESULT line).")
    nothing = check_footing([_outcome("ddp", 1)], PLAN)
    assert not nothing.equal and "could not be checked" in nothing.text


def test_the_sweep_reads_what_the_trainers_print() -> None:
    # ringscope.gui.core does not import the trainers: the prefix and the footing's keys are kept equal here.
    assert RESULT_PREFIX == common.RESULT_PREFIX
    parser = argparse.ArgumentParser()
    common.add_common_arguments(parser)
    assert tuple(common.footing(parser.parse_args([]), 10)) == FOOTING_KEYS
