"""Who makes the others wait at the all-reduce, and why: straggler detection and the exposed-wait diagnosis.

This module owns the recorded-session straggler figures of shared/MEASURING.md (Stragglers): the ``Straggler``
record, its thresholds, the windowed detection over steady steps, the attribution of the lateness to a phase or to
the hardware, and the one-word diagnosis of what the exposed communication is about ("straggler", "network",
"none"). It works on the step columns and phase seconds that ``ringscope.gui.core.analysis.summary`` computes and is
re-exported by it; it must never import ``ringscope.gui.core.analysis.summary`` (that module imports this one), Qt or
an ML framework. The cheap live heuristic of the dashboard is a different thing and lives in
``ringscope.gui.core.live.snapshot``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np

from ringscope.gui.core.session_data import Columns, distinct

STRAGGLER_WINDOW_STEPS: Final[int] = 20
STRAGGLER_MIN_SHARE_OF_STEPS: Final[float] = 0.6
"""A rank is the straggler of a window only if it has the smallest exposed wait in at least this share of steps."""
STRAGGLER_MIN_GAP_SHARE: Final[float] = 0.05
"""... and if it is late by at least this share of the median step time (smaller gaps are noise)."""
STRAGGLER_MIN_WINDOW_SHARE: Final[float] = 0.5
"""A run's straggler is flagged in at least this share of its windows: a lateness that holds, not a few
noisy windows."""
STRAGGLER_MAX_P_VALUE: Final[float] = 1e-3
"""... and its lateness is significant: over every step all ranks reported, a one-sided sign test of "it waits less
than the others' median" must reject chance at this level (balanced ranks on a busy machine take turns)."""
NETWORK_COMPUTE_SPREAD: Final[float] = 0.10
"""Compute of every rank within 10 % of the median: nobody's compute stands out (network-bound diagnosis)."""
NETWORK_STEP_SPREAD: Final[float] = 0.02
"""... or within 2 % of the step time."""
HARDWARE_CLOCK_RATIO: Final[float] = 0.9
"""SM clock below 90 % of the other GPUs' median counts as a hardware cause."""


class GpuClockReading(Protocol):
    """The per-GPU figures the hardware check reads; ``ringscope.gui.core.analysis.summary.GpuStats`` provides them.

    A protocol rather than an import of ``GpuStats`` so that this module does not import
    ``ringscope.gui.core.analysis.summary``.
    """

    @property
    def host(self) -> str: ...
    @property
    def gpu_index(self) -> int: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def sm_clock_p50_mhz(self) -> float | None: ...
    @property
    def throttled_share(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that arrives last at the all-reduce, how late it is, and why (MEASURING.md, Stragglers)."""

    rank: int
    windows_flagged: int
    windows_total: int
    min_share: float
    gap_s: float
    gap_share: float
    cause: str  # "input_pipeline" | "hardware" | "compute" | "other" | "unknown"
    cause_detail: str


# ---- Public API ---------------------------------------------------------------------------------------------------


def find_straggler(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray,
                   window_steps: int = STRAGGLER_WINDOW_STEPS,
                   gpus: Sequence[GpuClockReading] = ()) -> Straggler | None:
    """The rank with the smallest exposed wait in most steps of a window, late by a real share of the step, in at
    least half of the windows, and significantly (``sign_test_p``) over the whole steady run.

    The gap is the median exposed wait of the *other* ranks minus this rank's wait: with two ranks the median of all
    would halve the lateness. Returns the rank flagged in most windows, or None.
    """
    ranks = distinct(steps["rank"][steady]).astype(int)
    if len(ranks) < 2:
        return None
    wait, _step_index, step_s = _per_step_matrix(steps, steady, ranks)
    if wait.shape[1] == 0:
        return None
    flagged: dict[int, list[tuple[float, float, float]]] = {}
    windows = 0
    for lo in range(0, wait.shape[1], window_steps):
        block = wait[:, lo:lo + window_steps]
        if (~np.isnan(block).any(axis=0)).sum() < max(3, min(window_steps, block.shape[1]) // 2):
            continue
        windows += 1
        verdict = judge_window(block, step_s[:, lo:lo + window_steps])
        if verdict is not None:
            flagged.setdefault(int(ranks[verdict.row]), []).append((verdict.share, verdict.gap_s, verdict.gap_share))
    if not flagged:
        return None
    rank = max(flagged, key=lambda r: len(flagged[r]))
    found = flagged[rank]
    if len(found) < math.ceil(STRAGGLER_MIN_WINDOW_SHARE * windows):
        return None
    if sign_test_p(wait, int(np.searchsorted(ranks, rank))) > STRAGGLER_MAX_P_VALUE:
        return None
    gap_s = float(np.median([g for _, g, _ in found]))
    cause, detail = _straggler_cause(steps, phases, steady, rank, gap_s, gpus)
    return Straggler(rank=rank, windows_flagged=len(found), windows_total=windows,
                     min_share=float(np.mean([s for s, _, _ in found])), gap_s=gap_s,
                     gap_share=float(np.median([g for _, _, g in found])), cause=cause, cause_detail=detail)


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """The straggler of one window of steps: its row, the share of steps it waited least, how late it was."""

    row: int
    share: float
    gap_s: float
    gap_share: float


def judge_window(wait: np.ndarray, step_s: np.ndarray, min_share_of_steps: float = STRAGGLER_MIN_SHARE_OF_STEPS,
                 min_gap_share: float = STRAGGLER_MIN_GAP_SHARE) -> WindowVerdict | None:
    """The one straggler rule, for the whole-run analysis (per window of steps) and the live window (recent steps).

    ``wait`` and ``step_s`` are (rank x step) matrices of exposed wait and step time; NaN where a rank has no such
    step. Rows without any value (ranks that left) are not candidates; only steps every remaining rank reported
    are compared. The straggler is the row with the smallest exposed wait in at least ``min_share_of_steps`` of
    them, late by at least ``min_gap_share`` of the median step (the others' median wait minus its own).
    """
    present = np.flatnonzero(~np.isnan(wait).all(axis=1))
    if present.size < 2:
        return None
    block, steps = wait[present], step_s[present]
    complete = ~np.isnan(block).any(axis=0)
    if not complete.any():
        return None
    block, steps = block[:, complete], steps[:, complete]
    counts = np.bincount(np.argmin(block, axis=0), minlength=present.size)
    top = int(np.argmax(counts))
    share = float(counts[top]) / block.shape[1]
    gap = float(np.median(np.median(np.delete(block, top, axis=0), axis=0) - block[top]))
    median_step = float(np.nanmedian(steps))
    gap_share = gap / median_step if median_step > 0 else 0.0
    if share >= min_share_of_steps and gap_share >= min_gap_share:
        return WindowVerdict(int(present[top]), share, gap, gap_share)
    return None


def sign_test_p(wait: np.ndarray, row: int) -> float:
    """One-sided sign test that row ``row`` of a (rank x step) exposed-wait matrix waits less than the median of the
    other rows, over the steps every row reported: the chance of seeing at least that many such steps if it were a
    coin toss. 1.0 when there is nothing to test."""
    complete = ~np.isnan(wait).any(axis=0)
    if wait.shape[0] < 2 or not complete.any():
        return 1.0
    block = wait[:, complete]
    diff = np.median(np.delete(block, row, axis=0), axis=0) - block[row]
    wins, n = int((diff > 0).sum()), int((diff != 0).sum())
    if n == 0:
        return 1.0
    if n > 200:  # normal approximation with continuity correction
        z = (wins - 0.5 - n / 2) / math.sqrt(n / 4)
        return 0.5 * math.erfc(z / math.sqrt(2))
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2.0 ** n


def diagnose_wait(straggler: Straggler | None, comm_exposed_share: float, rank_compute_s: Sequence[float],
                  links_congested: bool | None = None, step_s: float = 0.0) -> str:
    """What the exposed communication is mostly about: a straggler, the network, or nothing notable.

    ``comm_exposed_share`` is the exposed-comm share of the mean steady step; ``rank_compute_s`` holds the mean
    steady compute seconds of every rank that has steady steps (empty when none has). Compute counts as even when
    every rank is within 10 % of the median, or within 2 % of the step (``step_s``): a 0.4 ms difference on a 1 ms
    compute inside a 120 ms all-reduce-bound step stands out from nothing.

    ``links_congested`` (``ringscope.gui.core.analysis.network``): across hosts, "network" also needs a link that
    queues; when every host's link is idle the wait is the collective's own cost (latency, CPU contention of the ranks),
    not the network, and the answer is "none". None (one host, or no link figures) keeps the rule above alone.
    """
    if straggler is not None:
        return "straggler"
    if not rank_compute_s:
        return "none"
    median = float(np.median(rank_compute_s))
    spread = max(abs(c - median) for c in rank_compute_s)
    even = median > 0 and spread <= max(NETWORK_COMPUTE_SPREAD * median, NETWORK_STEP_SPREAD * step_s)
    if comm_exposed_share >= 0.2 and even and links_congested is not False:
        return "network"
    return "none"


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _per_step_matrix(steps: Columns, steady: np.ndarray, ranks: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exposed wait and step time as (rank x step index) matrices, NaN where a rank has no such step."""
    index = distinct(steps["step"][steady])
    wait = np.full((len(ranks), len(index)), np.nan)
    step_s = np.full((len(ranks), len(index)), np.nan)
    cols = np.searchsorted(index, steps["step"][steady])
    rows = np.searchsorted(ranks, steps["rank"][steady])  # ranks: np.unique of these, sorted
    wait[rows, cols] = steps["comm_exposed_s"][steady]
    step_s[rows, cols] = steps["step_s"][steady]
    return wait, index, step_s


def _straggler_cause(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray, rank: int, gap_s: float,
                     gpus: Sequence[GpuClockReading]) -> tuple[str, str]:
    """Attribute the lateness to the phase in which this rank exceeds the others' median."""
    rank_of = steps["rank"][steady]
    order = np.argsort(rank_of, kind="stable")  # one sort, then each rank's steady steps are one slice
    ranks, starts = np.unique(rank_of[order], return_index=True)
    bounds = [*starts, len(order)]
    mine = int(np.searchsorted(ranks, rank))
    excess: dict[str, float] = {}
    for name in ("data_wait", "compute", "other"):
        values = phases[name][steady][order]
        medians = [float(np.median(values[lo:hi])) for lo, hi in itertools.pairwise(bounds)]
        excess[name] = medians[mine] - float(np.median(medians[:mine] + medians[mine + 1:]))
    name = max(excess, key=lambda k: excess[k])
    value_ms = excess[name] * 1e3
    if excess[name] < 0.5 * gap_s:
        return "unknown", (f"rank {rank} is late by {gap_s * 1e3:.1f} ms but no measured phase explains it "
                           f"(largest excess: {name} +{value_ms:.1f} ms)")
    if name == "data_wait":
        return "input_pipeline", f"rank {rank} waits {value_ms:.1f} ms more for data per step than the others"
    if name == "other":
        return "other", (f"rank {rank} spends {value_ms:.1f} ms more per step outside data/compute/comm "
                         f"(host-side work, logging, synchronization)")
    hardware = _hardware_evidence(rank, gpus)
    if hardware:
        return "hardware", f"rank {rank} computes {value_ms:.1f} ms longer per step; {hardware}"
    return "compute", (f"rank {rank} computes {value_ms:.1f} ms longer per step; no clock/throttle evidence "
                       f"(check host load, batch size, placement)")


def _hardware_evidence(rank: int, gpus: Sequence[GpuClockReading]) -> str:
    mine = [g for g in gpus if g.rank == rank]
    others = [g.sm_clock_p50_mhz for g in gpus if g.rank != rank and g.sm_clock_p50_mhz]
    for g in mine:
        if g.throttled_share and g.throttled_share > 0.2:
            return f"its GPU {g.host}:{g.gpu_index} reports throttle reasons in {g.throttled_share:.0%} of samples"
        if g.sm_clock_p50_mhz and others and g.sm_clock_p50_mhz < HARDWARE_CLOCK_RATIO * float(np.median(others)):
            return (f"its GPU {g.host}:{g.gpu_index} runs at {g.sm_clock_p50_mhz:.0f} MHz SM clock vs "
                    f"{float(np.median(others)):.0f} MHz on the others")
    return ""
