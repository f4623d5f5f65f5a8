"""Per-rank metric families of one run, and the percentiles over its ranks.

What it owns: which ranks of a run get series of their own (all up to ``MetricsLimits.max_ranks_per_run``; beyond
it the ``top_ranks`` with the largest AllReduce stall share, plus the straggler), the per-rank gauges and counters,
and the p5 / p50 / p95 over every rank of the run.

Every per-rank figure is the ``Snapshot``'s: means over the store's recent window (``recent_window`` steps per rank,
first-batch steps excluded), so a Prometheus scrape and the window's tables agree. What it must never do: turn an
unknown phase (Keras ``fit`` sends none) into 0, or import Qt.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringscope.gui.core.analysis.quantiles import finite_percentiles
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.metrics.families import Families, MetricsLimits

RUN_LABELS: Final[tuple[str, ...]] = ("run", "framework", "strategy")
RANK_LABELS: Final[tuple[str, ...]] = ("run", "rank", "host", "framework", "strategy")
QUANTILES: Final[tuple[float, ...]] = (0.05, 0.5, 0.95)

_SECONDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("step", "recent_step_s", "Step time"),
    ("data_wait", "recent_data_wait_s", "Data-loader wait (blocked waiting for the batch)"),
    ("compute", "recent_compute_s", "Compute (forward + backward + optimizer)"),
    ("comm_exposed", "recent_comm_exposed_s", "Exposed communication, the AllReduce stall (comm the rank waited "
                                              "for, including waiting for the slowest rank)"),
)
_WINDOW: Final[str] = "mean over the rank's recent steps (the window's recent window, first batch excluded)"


def add_rank_families(families: Families, snap: Snapshot, run: tuple[str, str, str], limits: MetricsLimits) -> int:
    """Add the per-rank series and the percentiles over ranks of one run; returns how many ranks got series."""
    seconds = {phase: np.asarray(getattr(snap, field), np.float64) for phase, field, _ in _SECONDS}
    step = seconds["step"]
    with np.errstate(all="ignore"):
        shares = {phase: np.where(step > 0, seconds[phase] / step, np.nan) for phase, _, _ in _SECONDS[1:]}
    rows = exported_rows(snap, shares["comm_exposed"], limits)
    for row in rows:
        labels = (run[0], str(int(snap.ranks[row])), snap.hosts[row] if row < len(snap.hosts) else "", *run[1:])
        for phase, _, what in _SECONDS:
            families.gauge(f"ringscope_rank_{phase}_seconds", f"{what}, seconds: {_WINDOW}.", RANK_LABELS, labels,
                           seconds[phase][row])
        for phase, _, what in _SECONDS[1:]:
            families.gauge(f"ringscope_rank_{phase}_ratio", f"{what} as a share of the rank's step time (0..1): "
                           "its recent mean over the recent mean step.", RANK_LABELS, labels, shares[phase][row])
        families.counter("ringscope_rank_steps", "Steps of this rank received by this collector.", RANK_LABELS,
                         labels, _at(snap.rank_steps, row))
        families.counter("ringscope_rank_samples", "Samples this rank processed (only when its agent reports "
                         "samples).", RANK_LABELS, labels, _at(snap.rank_samples, row))
        families.gauge("ringscope_rank_last_step", "The rank's latest step number.", RANK_LABELS, labels,
                       _at(snap.current_step, row))
        families.gauge("ringscope_rank_last_seen_timestamp_seconds", "When the collector last heard from the "
                       "rank's agent (Unix time).", RANK_LABELS, labels, _at(snap.last_seen_s, row))
    for phase, _, what in _SECONDS:
        _percentiles(families, f"ringscope_ranks_{phase}_seconds",
                     f"{what}, seconds: p5 / p50 / p95 over every rank of the run of the per-rank recent means.",
                     run, seconds[phase])
    for phase, _, what in _SECONDS[1:]:
        _percentiles(families, f"ringscope_ranks_{phase}_ratio",
                     f"{what} as a share of step time: p5 / p50 / p95 over every rank of the run.", run, shares[phase])
    return len(rows)


def exported_rows(snap: Snapshot, stall_share: np.ndarray, limits: MetricsLimits) -> list[int]:
    """Rows of ``snap`` whose ranks get series of their own (sorted).

    Every rank while the run has at most ``max_ranks_per_run``; beyond that the ``top_ranks`` with the largest
    AllReduce stall share (ranks without a share yet are not "worst") and the straggler, whose series the stall of
    the others is compared with.
    """
    count = len(snap.ranks)
    if count <= limits.max_ranks_per_run:
        return list(range(count))
    known = np.isfinite(stall_share)
    order = np.argsort(np.where(known, -stall_share, np.inf), kind="stable")
    chosen = {int(row) for row in order[: limits.top_ranks] if known[row]}
    straggler = snap.straggler_row()
    if straggler is not None:
        chosen.add(straggler)
    return sorted(chosen)


def _percentiles(families: Families, name: str, documentation: str, run: tuple[str, str, str],
                 values: np.ndarray) -> None:
    points = finite_percentiles(values, QUANTILES)
    if points is None:
        return
    for quantile, point in zip(QUANTILES, points, strict=True):
        families.gauge(name, documentation, (*RUN_LABELS, "quantile"), (*run, f"{quantile:g}"), point)


def _at(values: np.ndarray, row: int) -> float | None:
    return float(values[row]) if row < len(values) else None
