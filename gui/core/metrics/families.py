"""Metric families built for one scrape: a small builder that skips missing readings and empty families.

What it owns: ``Families`` (one gauge or counter family per name, created on first use, with its help text and
label names) and ``MetricsLimits`` (the caps on label cardinality, shared by the run, rank and GPU parts).

What it must never do: emit a NaN or infinite value (a missing reading is no sample, never 0), emit a family
without samples, or import Qt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

KEEP_ENDED_S: Final[float] = 600.0
"""Default: a run that ended more than this long ago is no longer exported (its series stop; Prometheus keeps them)."""
MAX_RUNS: Final[int] = 16
"""Default: runs exported at once (running ones first, then the most recently ended)."""
MAX_RANKS_PER_RUN: Final[int] = 64
"""Default: ranks of a run exported one series each; beyond this, percentiles over ranks + the worst ranks."""
TOP_RANKS: Final[int] = 8
"""Default: ranks exported per run beyond the cap: the worst by AllReduce stall share (plus the straggler)."""
GPU_STALE_S: Final[float] = 30.0
"""A GPU whose latest reading is older than this is not exported (its agent stopped sampling or went away)."""


@dataclass(frozen=True, slots=True)
class MetricsLimits:
    """Caps that bound the exporter's label cardinality (see the README's "Prometheus and Grafana").

    Series exist only for runs that are running (or hung) or ended less than ``keep_ended_s`` ago, at most
    ``max_runs`` of them. A run with more than ``max_ranks_per_run`` ranks exports per-rank series only for its
    ``top_ranks`` ranks with the largest AllReduce stall share and for its straggler; the p5 / p50 / p95 over all
    its ranks are exported for every run.
    """

    keep_ended_s: float = KEEP_ENDED_S
    max_runs: int = MAX_RUNS
    max_ranks_per_run: int = MAX_RANKS_PER_RUN
    top_ranks: int = TOP_RANKS
    gpu_stale_s: float = GPU_STALE_S

    def __post_init__(self) -> None:
        if not (self.keep_ended_s >= 0 and self.max_runs >= 1 and self.max_ranks_per_run >= 1
                and self.top_ranks >= 0 and self.gpu_stale_s > 0):
            raise ValueError(f"MetricsLimits: need keep_ended_s >= 0, max_runs >= 1, max_ranks_per_run >= 1, "
                             f"top_ranks >= 0, gpu_stale_s > 0; got {self}")


class Families:
    """The families of one scrape, in the order they were first used."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def gauge(self, name: str, documentation: str, labels: Sequence[str], label_values: Sequence[str],
              value: float | None) -> None:
        """Add one gauge sample; nothing when ``value`` is None, NaN or infinite (no data is not zero)."""
        self._add(GaugeMetricFamily, name, documentation, labels, label_values, value)

    def counter(self, name: str, documentation: str, labels: Sequence[str], label_values: Sequence[str],
                value: float | None) -> None:
        """Add one counter sample (exposed as ``name_total``); nothing for a missing value."""
        self._add(CounterMetricFamily, name, documentation, labels, label_values, value)

    def metrics(self) -> list[Metric]:
        """Every family that received at least one sample."""
        return [family for family in self._families.values() if family.samples]

    def _add(self, kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, documentation: str,
             labels: Sequence[str], label_values: Sequence[str], value: float | None) -> None:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(name, documentation, labels=list(labels))
        if value is None or not math.isfinite(value):
            return
        family.add_metric(list(label_values), float(value))  # type: ignore[attr-defined]
