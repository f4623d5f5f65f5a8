"""The sweep's recommendation in plain language, with the figures behind it.

Three pieces of evidence (issue 13): the best scaling efficiency of each framework at the largest rank count, where
adding ranks makes the AllReduce stall grow faster than compute shrinks (per 1000 samples, so that configurations
of different sizes compare), and the cheapest configuration per 1000 samples. Takes ``SweepRow``s only, so it is
tested on rows written by hand. Qt-free; never guesses: a figure that was not measured is said to be missing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ringscope.gui.core.analysis.cost import CURRENCY
from ringscope.gui.core.sweep.analysis import SweepRow
from ringscope.gui.core.sweep.plan import FRAMEWORK_TITLES


@dataclass(frozen=True, slots=True)
class Advice:
    """``headline``: the recommendation in one sentence; ``reasons``: the sentences that explain it (scaling, where
    the AllReduce stall outgrows compute); ``evidence``: one line per figure it rests on."""

    headline: str
    reasons: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The headline and its reasons as one paragraph."""
        return " ".join((self.headline, *self.reasons))


@dataclass(frozen=True, slots=True)
class StallCrossing:
    """Going from ``fewer`` to ``more`` ranks: how much the AllReduce stall grew and compute shrank, in ms of wall
    time per 1000 samples; ``crossed`` when the stall grew more than compute shrank."""

    framework: str
    fewer: int
    more: int
    stall_growth_ms: float
    compute_shrink_ms: float

    @property
    def crossed(self) -> bool:
        """True when the added ranks bought more waiting than they saved computing."""
        return self.stall_growth_ms > self.compute_shrink_ms


# ---- Public API ----------------------------------------------------------------------------------------------------


def recommend(rows: Sequence[SweepRow]) -> Advice:
    """The recommendation for a sweep's rows (any order)."""
    measured = [row for row in rows if row.measured]
    if not measured:
        return Advice("No configuration completed steady-state steps, so there is nothing to compare; the status of "
                      "each configuration says why.", (), tuple(f"{row.label}: {row.status}" for row in rows))
    sentences = [_scaling_sentence(measured)]
    evidence = [_scaling_evidence(measured)]
    for framework in _frameworks(measured):
        crossings = stall_crossings(measured, framework)
        sentence, line = _stall_text(framework, crossings)
        sentences.append(sentence)
        evidence.append(line)
    evidence.append(_cost_evidence(measured))
    failed = [row for row in rows if not row.measured]
    if failed:
        evidence.append("Not measured: " + "; ".join(f"{row.label} ({row.status})" for row in failed))
    return Advice(_lead(measured), tuple(s for s in sentences if s), tuple(evidence))


def stall_crossings(rows: Sequence[SweepRow], framework: str) -> list[StallCrossing]:
    """For each step to the next measured rank count of ``framework``: stall growth and compute shrink (ms per 1000
    samples). Pairs where either share was not measured are left out."""
    mine = sorted((row for row in rows if row.framework == framework and row.measured), key=lambda row: row.ranks)
    out = []
    for fewer, more in itertools.pairwise(mine):
        stall = (fewer.ms_per_1000_samples(fewer.allreduce_stall_share),
                 more.ms_per_1000_samples(more.allreduce_stall_share))
        compute = (fewer.ms_per_1000_samples(fewer.compute_share), more.ms_per_1000_samples(more.compute_share))
        if None in stall or None in compute:
            continue
        out.append(StallCrossing(framework, fewer.ranks, more.ranks, _f(stall[1]) - _f(stall[0]),
                                 _f(compute[0]) - _f(compute[1])))
    return out


def money(value: float | None) -> str:
    """``$12.34`` from 1 up; below, three significant digits (``$0.0000174``): the cost of 1000 samples of a small
    model is a fraction of a cent, and "$0.00" would say it cost nothing."""
    if value is None:
        return "no data"
    if value >= 1 or value <= 0:
        return f"{CURRENCY}{value:,.2f}"
    digits = max(4, 2 - math.floor(math.log10(value)))
    return f"{CURRENCY}{value:.{digits}f}"


def title(framework: str) -> str:
    """A framework's name for sentences (``PyTorch DDP``)."""
    return FRAMEWORK_TITLES.get(framework, framework)


# ---- Sentences -----------------------------------------------------------------------------------------------------


def _lead(measured: list[SweepRow]) -> str:
    fastest = max(measured, key=lambda row: _f(row.throughput))
    priced = [row for row in measured if row.cost_per_1000_samples is not None]
    cheapest = min(priced, key=lambda row: _f(row.cost_per_1000_samples)) if priced else None
    if cheapest is None or cheapest is fastest:
        cost = f" and the lowest cost ({money(fastest.cost_per_1000_samples)} per 1000 samples)" if cheapest else ""
        return (f"Recommendation: use {title(fastest.framework)} on {_ranks(fastest.ranks)}: the highest throughput "
                f"of this sweep ({_rate(fastest)}){cost}.")
    return (f"Recommendation: for the shortest training use {title(fastest.framework)} on {_ranks(fastest.ranks)} "
            f"({_rate(fastest)}); for the lowest cost use {title(cheapest.framework)} on {_ranks(cheapest.ranks)} "
            f"({money(cheapest.cost_per_1000_samples)} per 1000 samples, against "
            f"{money(fastest.cost_per_1000_samples)}).")


def _scaling_sentence(measured: list[SweepRow]) -> str:
    top = max(row.ranks for row in measured)
    at_top = [row for row in measured if row.ranks == top and row.efficiency is not None]
    if top == 1 or not at_top:
        return ""
    best = max(at_top, key=lambda row: _f(row.efficiency))
    others = [row for row in at_top if row is not best]
    if not others:
        return f"At {top} ranks {title(best.framework)} keeps {_pct(best.efficiency)} of linear scaling."
    rest = ", ".join(f"{title(row.framework)} {_pct(row.efficiency)}" for row in others)
    return f"At {top} ranks {title(best.framework)} scales best: {_pct(best.efficiency)} of linear ({rest})."


def _scaling_evidence(measured: list[SweepRow]) -> str:
    parts = []
    for framework in _frameworks(measured):
        mine = [row for row in measured if row.framework == framework]
        top = max(mine, key=lambda row: row.ranks)
        base = next((row for row in mine if row.ranks == 1), None)
        if top.ranks == 1 or top.efficiency is None or base is None:
            parts.append(f"{framework}: measured on {_ranks(top.ranks)} only ({_rate(top)})")
            continue
        ideal = top.ranks * _f(base.throughput)
        parts.append(f"{framework}: {_ranks(top.ranks)} at {_pct(top.efficiency)} of linear ({_rate(top)}; ideal "
                     f"{ideal:,.{_digits(base)}f}, 1 rank {_rate(base)})")
    return "Best scaling efficiency at the largest rank count — " + "; ".join(parts)


def _stall_text(framework: str, crossings: list[StallCrossing]) -> tuple[str, str]:
    """(the sentence for the recommendation, the evidence line)."""
    if not crossings:
        return "", f"AllReduce stall vs compute — {framework}: fewer than two rank counts with measured phases"
    steps = "; ".join(f"{c.fewer}→{c.more} ranks: stall {c.stall_growth_ms:+.1f} ms, compute "
                      f"{-c.compute_shrink_ms:+.1f} ms per 1000 samples" for c in crossings)
    line = f"AllReduce stall vs compute — {framework}: {steps}"
    first = next((c for c in crossings if c.crossed), None)
    if first is None:
        last = crossings[-1].more
        return (f"{title(framework)}: up to {last} ranks, compute per sample shrank faster than the AllReduce stall "
                "grew, so more ranks still pay off."), line
    if first.compute_shrink_ms > 0:
        shrink = f"compute shrank by only {first.compute_shrink_ms:.1f} ms"
    else:
        shrink = f"compute did not shrink ({-first.compute_shrink_ms:+.1f} ms)"
    return (f"{title(framework)}: from {first.fewer} to {first.more} ranks the AllReduce stall grew by "
            f"{first.stall_growth_ms:.1f} ms per 1000 samples while {shrink}: beyond {_ranks(first.fewer)}, added "
            "ranks mostly wait for the all-reduce."), line


def _cost_evidence(measured: list[SweepRow]) -> str:
    priced = sorted((row for row in measured if row.cost_per_1000_samples is not None),
                    key=lambda row: _f(row.cost_per_1000_samples))
    if not priced:
        return "Cost per 1000 samples: not priced"
    unit = priced[0].cost_unit or "GPU-hours"
    parts = ", ".join(f"{row.label} {money(row.cost_per_1000_samples)}"
                      + (f" ({money(row.waiting_cost)} waiting)" if row.waiting_cost is not None else "")
                      for row in priced)
    return f"Cost per 1000 samples (cheapest first; {money(priced[0].price_per_gpu_hour)} per {unit[:-1]}): {parts}"


# ---- Helpers -------------------------------------------------------------------------------------------------------


def _frameworks(rows: Sequence[SweepRow]) -> list[str]:
    return list(dict.fromkeys(row.framework for row in rows))


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


def _rate(row: SweepRow) -> str:
    return f"{_f(row.throughput):,.{_digits(row)}f} {row.throughput_unit or 'samples/s'}"


def _digits(row: SweepRow) -> int:
    """Decimals of a rate: samples/s are in the hundreds or more; steps/s of a slow script may be below 10."""
    return 0 if row.samples_per_s is not None or _f(row.throughput) >= 100 else 1


def _pct(value: float | None) -> str:
    return "no data" if value is None else f"{value:.0%}"


def _f(value: float | None) -> float:
    return 0.0 if value is None else float(value)
