"""The sweep's recommendation, from rows written by hand: which configuration, why, and the figures behind it."""

from __future__ import annotations

import pytest

from ringscope.gui.core.sweep.advice import money, recommend, stall_crossings
from ringscope.gui.core.sweep.analysis import SweepRow, with_efficiency


def _row(framework: str, ranks: int, samples_per_s: float | None, *, stall: float = 0.1, compute: float = 0.8,
         cost: float | None = None, waiting: float | None = None, status: str = "ok") -> SweepRow:
    """A measured row (data wait 5 %, other the rest); cost defaults to ranks x $3.6 per hour per 1000 samples."""
    if samples_per_s is None:
        return SweepRow(framework, ranks, f"run-{framework}-{ranks}", 32 * ranks, status=status)
    per_1000 = cost if cost is not None else ranks * 3.6 * 1000 / samples_per_s / 3600
    return SweepRow(framework, ranks, f"run-{framework}-{ranks}", 32 * ranks, steps=100,
                    samples_per_s=samples_per_s, data_wait_share=0.05, compute_share=compute,
                    allreduce_stall_share=stall, other_share=1 - 0.05 - compute - stall,
                    cost_per_1000_samples=per_1000, waiting_cost=waiting if waiting is not None else per_1000 / 5,
                    price_per_gpu_hour=3.6, cost_unit="GPU-hours")


def test_one_configuration_fastest_and_cheapest_is_recommended_outright() -> None:
    rows = with_efficiency([_row("ddp", 1, 1000.0, cost=0.002), _row("ddp", 2, 1900.0, cost=0.0019),
                            _row("tf-mirrored", 1, 800.0, cost=0.003), _row("tf-mirrored", 2, 1200.0, cost=0.004)])
    advice = recommend(rows)
    assert advice.headline == ("Recommendation: use PyTorch DDP on 2 ranks: the highest throughput of this sweep "
                               "(1,900 samples/s) and the lowest cost ($0.00190 per 1000 samples).")
    assert advice.reasons[0] == "At 2 ranks PyTorch DDP scales best: 95% of linear (TF MirroredStrategy 75%)."
    assert advice.evidence[0] == (
        "Best scaling efficiency at the largest rank count — ddp: 2 ranks at 95% of linear (1,900 samples/s; ideal "
        "2,000, 1 rank 1,000 samples/s); tf-mirrored: 2 ranks at 75% of linear (1,200 samples/s; ideal 1,600, "
        "1 rank 800 samples/s)")
    assert advice.evidence[-1].startswith("Cost per 1000 samples (cheapest first; $3.60 per GPU-hour): ddp:2 "
                                          "$0.00190 ($0.000380 waiting), ddp:1 $0.00200")
    assert advice.text.startswith(advice.headline + " At 2 ranks")


def test_fastest_and_cheapest_differ_both_are_named() -> None:
    rows = with_efficiency([_row("ddp", 1, 1000.0), _row("ddp", 2, 1500.0)])
    assert recommend(rows).headline == (
        "Recommendation: for the shortest training use PyTorch DDP on 2 ranks (1,500 samples/s); for the lowest "
        "cost use PyTorch DDP on 1 rank ($0.00100 per 1000 samples, against $0.00133).")


def test_where_the_allreduce_stall_grows_faster_than_compute_shrinks() -> None:
    # ms of wall time per 1000 samples = share x 1e6 / samples_per_s:
    # 1 rank: stall 0.1 x 1000 = 100 ms, compute 0.8 x 1000 = 800 ms
    # 2 ranks: stall 0.2 x 1e6/1800 = 111.1 ms, compute 0.7 x 1e6/1800 = 388.9 ms (shrank 411 ms: pays off)
    # 4 ranks: stall 0.6 x 1e6/2000 = 300 ms, compute 0.3 x 1e6/2000 = 150 ms (stall +188.9, compute -238.9: pays)
    # 8 ranks: stall 0.8 x 1e6/1500 = 533 ms, compute 0.15 x 1e6/1500 = 100 ms (stall +233, compute -50: crossed)
    rows = with_efficiency([_row("ddp", 1, 1000.0), _row("ddp", 2, 1800.0, stall=0.2, compute=0.7),
                            _row("ddp", 4, 2000.0, stall=0.6, compute=0.3),
                            _row("ddp", 8, 1500.0, stall=0.8, compute=0.15)])
    crossings = stall_crossings(rows, "ddp")
    assert [(c.fewer, c.more, c.crossed) for c in crossings] == [(1, 2, False), (2, 4, False), (4, 8, True)]
    assert crossings[2].stall_growth_ms == pytest.approx(233.33, abs=0.01)
    assert crossings[2].compute_shrink_ms == pytest.approx(50.0)
    advice = recommend(rows)
    assert ("PyTorch DDP: from 4 to 8 ranks the AllReduce stall grew by 233.3 ms per 1000 samples while compute "
            "shrank by only 50.0 ms: beyond 4 ranks, added ranks mostly wait for the all-reduce.") in advice.reasons
    assert ("AllReduce stall vs compute — ddp: 1→2 ranks: stall +11.1 ms, compute -411.1 ms per 1000 samples; "
            "2→4 ranks: stall +188.9 ms, compute -238.9 ms per 1000 samples; 4→8 ranks: stall +233.3 ms, compute "
            "-50.0 ms per 1000 samples") in advice.evidence


def test_stall_that_never_outgrows_compute_says_more_ranks_pay_off() -> None:
    rows = with_efficiency([_row("tf-mirrored", 1, 1000.0), _row("tf-mirrored", 2, 1900.0, stall=0.12)])
    assert ("TF MirroredStrategy: up to 2 ranks, compute per sample shrank faster than the AllReduce stall grew, so "
            "more ranks still pay off.") in recommend(rows).reasons


def test_compute_that_grows_with_more_ranks_is_said_plainly() -> None:
    rows = with_efficiency([_row("ddp", 1, 1000.0, compute=0.5), _row("ddp", 2, 800.0, stall=0.3, compute=0.6)])
    assert any("compute did not shrink (+250.0 ms)" in reason for reason in recommend(rows).reasons)


def test_failed_configurations_are_listed_and_nothing_measured_recommends_nothing() -> None:
    rows = with_efficiency([_row("ddp", 1, 1000.0), _row("ddp", 2, None, status="failed: exit code 1")])
    advice = recommend(rows)
    assert advice.evidence[-1] == "Not measured: ddp:2 (failed: exit code 1)"
    nothing = recommend([_row("ddp", 1, None, status="failed: no torch")])
    assert nothing.headline.startswith("No configuration completed steady-state steps")
    assert nothing.evidence == ("ddp:1: failed: no torch",)


def test_money_keeps_three_significant_digits_below_a_dollar() -> None:
    assert money(12.345) == "$12.35"
    assert money(0.0123) == "$0.0123"
    assert money(0.0000174321) == "$0.0000174"
    assert money(0.0) == "$0.00"
    assert money(None) == "no data"
