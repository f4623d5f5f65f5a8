"""Two sessions side by side (DDP vs MirroredStrategy, before vs after a fix): figures, differences, direction.

This module owns which figures are compared and which direction is better for each. It works on two analyzed
sessions (``AnalyzedSession``: what ``ringscope.gui.core.report.build_report`` returns); the pages that show a
comparison (HTML, PDF) are written by ``ringscope.gui.core.report.compare``. Must never import Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ringscope.gui.core.analysis.cost import CostBreakdown
from ringscope.gui.core.analysis.summary import SessionAnalysis
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.session_data import SessionData


class AnalyzedSession(Protocol):
    """What a comparison reads of each session: the recording, its analysis and its cost (a ``Report`` of
    ``ringscope.gui.core.report.model`` is one)."""

    @property
    def session(self) -> SessionData: ...

    @property
    def analysis(self) -> SessionAnalysis: ...

    @property
    def cost(self) -> CostBreakdown: ...


@dataclass(frozen=True, slots=True)
class MetricDelta:
    """One compared figure. ``better`` is "A", "B" or "same"; ``lower_is_better`` None for neutral figures."""

    key: str
    label: str
    unit: str
    a: float | None
    b: float | None
    lower_is_better: bool | None

    @property
    def delta(self) -> float | None:
        """B − A."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def delta_pct(self) -> float | None:
        """(B − A) / A in percent, None when A is 0 or missing."""
        d = self.delta
        return None if d is None or not self.a else 100.0 * d / abs(self.a)

    @property
    def better(self) -> str:
        """Which session is better on this figure (within 1 % counts as the same)."""
        d = self.delta
        if d is None or self.lower_is_better is None:
            return "n/a"
        scale = max(abs(self.a or 0.0), abs(self.b or 0.0), 1e-12)
        if abs(d) / scale < 0.01:
            return "same"
        return "A" if (d > 0) == self.lower_is_better else "B"

    @property
    def direction(self) -> str:
        """The change in words: "up 12.0 %", "down 3.1 %", "unchanged"."""
        d = self.delta
        if d is None:
            return "no data" if self.a is None or self.b is None else "n/a"
        pct = self.delta_pct
        if d == 0 or (pct is not None and abs(pct) < 0.05):
            return "unchanged"
        amount = f"{abs(pct):.1f} %" if pct is not None else f"{abs(d):,.3g} {self.unit}"
        return ("up " if d > 0 else "down ") + amount


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two analyzed sessions and their compared figures."""

    a: AnalyzedSession
    b: AnalyzedSession
    label_a: str
    label_b: str
    metrics: list[MetricDelta]


def compare(a: AnalyzedSession, b: AnalyzedSession, label_a: str = "A", label_b: str = "B") -> Comparison:
    """Compare two analyzed sessions on shares, step time, throughput, cost, stall and straggler.

    A session without steps has no step figures: they are ``None`` ("no data"), never 0, and name no winner.
    """
    unit = a.analysis.throughput_unit
    metrics = [
        MetricDelta("step_s", "Mean step time (steady)", "ms", _step(a, lambda r: r.analysis.overall.step_s * 1e3),
                    _step(b, lambda r: r.analysis.overall.step_s * 1e3), True),
        MetricDelta("throughput", "Throughput", unit, a.analysis.throughput, b.analysis.throughput
                    if b.analysis.throughput_unit == unit else None, False),
    ]
    for phase in PHASES:
        metrics.append(MetricDelta(
            f"share_{phase.name}", f"{phase.label} share", "% of step",
            _measured(a, _share_of(phase.name)), _measured(b, _share_of(phase.name)),
            phase.name != "compute"))
    metrics += [
        MetricDelta("idle_share", "Idle share", "% of step",
                    _measured(a, _idle), _measured(b, _idle), True),
        MetricDelta("stall_ms", "AllReduce stall per step", "ms",
                    _measured(a, lambda r: r.analysis.overall.seconds["comm_exposed"] * 1e3),
                    _measured(b, lambda r: r.analysis.overall.seconds["comm_exposed"] * 1e3), True),
        MetricDelta("straggler_gap_ms", "Straggler lateness", "ms", _step(a, _gap_ms), _step(b, _gap_ms), True),
        MetricDelta("cost_total", "Cost so far", a.cost.currency, a.cost.cost_total, b.cost.cost_total, None),
        MetricDelta("waste_share", "Cost of waiting share", "% of cost",
                    _measured(a, _waste), _measured(b, _waste), True),
        MetricDelta("cost_per_step", "Cost per 1000 steps", a.cost.currency, _per_kstep(a), _per_kstep(b), True),
        MetricDelta("cost_per_ksample", "Cost per 1000 samples", a.cost.currency, _per_ksample(a), _per_ksample(b),
                    True),
        MetricDelta("ranks", "Ranks", "ranks", float(len(a.analysis.ranks)), float(len(b.analysis.ranks)), None),
    ]
    return Comparison(a, b, label_a, label_b, metrics)


def _step(report: AnalyzedSession, figure: Callable[[AnalyzedSession], float]) -> float | None:
    """A step figure, or None when the session has no steps."""
    return figure(report) if report.analysis.overall.steps else None


def _idle(report: AnalyzedSession) -> float:
    return 100 * report.analysis.overall.idle_share


def _waste(report: AnalyzedSession) -> float:
    return 100 * report.cost.waste_share


def _share_of(phase: str) -> Callable[[AnalyzedSession], float]:
    """A phase's share of step time in percent."""
    return lambda report: 100 * report.analysis.overall.shares[phase]


def _measured(report: AnalyzedSession, figure: Callable[[AnalyzedSession], float]) -> float | None:
    """A phase figure, or None when there are no steps or their phases were not measured (Keras fit)."""
    return figure(report) if report.analysis.overall.phases_measured else None


def _gap_ms(report: AnalyzedSession) -> float:
    """The straggler's lateness (0 when none was flagged: every rank on time)."""
    s = report.analysis.straggler
    return s.gap_s * 1e3 if s is not None else 0.0


def _per_kstep(report: AnalyzedSession) -> float | None:
    steps = report.analysis.steps_total / max(len(report.analysis.ranks), 1)
    return 1000 * report.cost.cost_total / steps if steps else None


def _per_ksample(report: AnalyzedSession) -> float | None:
    """Cost per 1000 samples (all ranks): the figure that compares runs of different batch sizes or rank counts."""
    samples = report.session.steps["samples"]
    total = float(np.nansum(samples)) if len(samples) and not np.isnan(samples).all() else 0.0
    return 1000 * report.cost.cost_total / total if total > 0 else None
