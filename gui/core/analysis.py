"""Where did the step time go? Phase shares, throughput, GPU statistics, checkpoints and stragglers of a session.

This module owns the numbers every report, the cost model and the recommendations are built on, following
shared/MEASURING.md. It takes a ``SessionData`` (live or recorded) and returns plain frozen dataclasses. It must
never import Qt or an ML framework, and never invent a value: a phase that was not measured is counted in the data
quality section, and a missing GPU is stated, not shown as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from agent.schema import EventKind, GpuStatus
from gui.core.phases import PHASES
from gui.core.session_data import Columns, SessionData

WARMUP_STEPS: Final[int] = 3
"""Steps per rank kept out of steady-state figures after the first batch (compilation, caches, allocator)."""
STRAGGLER_WINDOW_STEPS: Final[int] = 20
STRAGGLER_MIN_SHARE_OF_STEPS: Final[float] = 0.6
"""A rank is the straggler of a window only if it has the smallest exposed wait in at least this share of steps."""
STRAGGLER_MIN_GAP_SHARE: Final[float] = 0.05
"""... and if it is late by at least this share of the median step time (smaller gaps are noise)."""
NETWORK_COMPUTE_SPREAD: Final[float] = 0.10
"""Compute of every rank within 10 % of the median: nobody's compute stands out (network-bound diagnosis)."""
HARDWARE_CLOCK_RATIO: Final[float] = 0.9
"""SM clock below 90 % of the other GPUs' median counts as a hardware cause."""
OTHER_RESOLUTION_S: Final[float] = 1e-6
"""A step's unattributed remainder ("other") smaller than this counts as 0."""

PHASE_NAMES: Final[tuple[str, ...]] = tuple(p.name for p in PHASES)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Mean seconds per step of each phase over some set of steps; ``shares`` are fractions of the mean step."""

    steps: int
    step_s: float
    seconds: dict[str, float]

    @property
    def shares(self) -> dict[str, float]:
        """Fraction of step time per phase (0 when there were no steps)."""
        return {k: (v / self.step_s if self.step_s > 0 else 0.0) for k, v in self.seconds.items()}

    @property
    def idle_share(self) -> float:
        """Share of step time not computing (data wait + exposed comm + other)."""
        return 1.0 - self.shares.get("compute", 0.0) if self.steps else 0.0


@dataclass(frozen=True, slots=True)
class RankSummary:
    """Steady-state figures of one rank."""

    rank: int
    breakdown: Breakdown
    steps_total: int
    samples_per_s: float | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per time bucket (seconds since session start): mean phase seconds per step and global throughput."""

    bucket_s: float
    start_s: np.ndarray
    phase_s: dict[str, np.ndarray]
    step_s: np.ndarray
    throughput: np.ndarray
    throughput_unit: str


@dataclass(frozen=True, slots=True)
class GpuStats:
    """Utilization statistics of one GPU (NVML ``util_pct``: share of time some kernel ran, not SM occupancy)."""

    host: str
    gpu_index: int
    name: str | None
    rank: int | None
    samples: int
    util_mean: float | None
    util_p5: float | None
    util_p50: float | None
    util_p95: float | None
    sm_clock_p50_mhz: float | None
    throttled_share: float | None


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


@dataclass(frozen=True, slots=True)
class DataQuality:
    """What the figures could not see: lost messages, rejected ones, agent drops, steps with unmeasured phases."""

    gaps: int
    missing_messages: int
    rejected: dict[str, int]
    agent_dropped_records: int
    steps_missing_phases: int


@dataclass(frozen=True, slots=True)
class SessionAnalysis:
    """Everything the reports say about one session. Times are Unix seconds; durations seconds."""

    run_id: str
    framework: str
    strategy: str
    source: str
    ranks: list[int]
    world_size: int
    start_s: float
    end_s: float
    steps_total: int
    steps_steady: int
    overall: Breakdown
    per_rank: list[RankSummary]
    timeline: Timeline
    throughput: float | None
    throughput_unit: str
    comm_compute_ratio: float | None
    gpu_present: bool
    gpu_statement: str
    gpus: list[GpuStats]
    checkpoints_s: list[float]
    restarts: int
    errors: int
    straggler: Straggler | None
    wait_diagnosis: str
    data_quality: DataQuality
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """Wall-clock span of the session (0 without steps)."""
        return max(0.0, self.end_s - self.start_s)

    @property
    def checkpoint_intervals_s(self) -> list[float]:
        """Seconds between consecutive checkpoints."""
        return [b - a for a, b in zip(self.checkpoints_s, self.checkpoints_s[1:], strict=False)]


# ---- Public API ---------------------------------------------------------------------------------------------------


def phase_seconds(steps: Columns) -> dict[str, np.ndarray]:
    """Per step, seconds of each phase; unmeasured phases count 0 and ``other`` absorbs them (clipped at 0)."""
    step = np.nan_to_num(steps["step_s"], nan=0.0)
    data = np.nan_to_num(steps["data_wait_s"], nan=0.0)
    compute = np.nan_to_num(steps["compute_s"], nan=0.0)
    comm = np.nan_to_num(steps["comm_exposed_s"], nan=0.0)
    other = step - data - compute - comm
    # Below a microsecond the remainder is float rounding of the subtraction, not time (it showed up as "3e-15 %").
    other[other < OTHER_RESOLUTION_S] = 0.0
    return {"data_wait": data, "compute": compute, "comm_exposed": comm, "other": other}


def steady_mask(steps: Columns, warmup_steps: int = WARMUP_STEPS) -> np.ndarray:
    """Steps kept for steady-state figures: not a first batch, and not among a rank's first ``warmup_steps``.

    Never drops more than half of a rank's steps, so a short session still has figures.
    """
    # first_batch is a 0/1 float column (NaN when not sent: not a first batch).
    keep = ~(np.nan_to_num(np.asarray(steps["first_batch"], dtype=np.float64), nan=0.0) > 0)
    ranks = steps["rank"]
    for rank in np.unique(ranks):
        idx = np.flatnonzero(ranks == rank)
        skip = min(warmup_steps, len(idx) // 2)
        if skip:
            order = idx[np.argsort(steps["step"][idx], kind="stable")]
            keep[order[:skip]] = False
    return keep


def analyze(session: SessionData, *, warmup_steps: int = WARMUP_STEPS, bucket_s: float | None = None,
            window_steps: int = STRAGGLER_WINDOW_STEPS) -> SessionAnalysis:
    """Analyze a whole session. ``bucket_s`` defaults to about 60 buckets over the session."""
    steps = session.steps
    hello = session.agents[0] if session.agents else None
    n = len(steps["step"])
    start_s = float(np.nanmin(steps["start_s"])) if n else (hello.started_s if hello else 0.0)
    end_s = float(np.nanmax(steps["end_s"])) if n else start_s
    phases = phase_seconds(steps)
    steady = steady_mask(steps, warmup_steps)
    overall = _breakdown(steps, phases, steady)
    per_rank = [_rank_summary(steps, phases, steady, int(rank)) for rank in np.unique(steps["rank"])]
    throughput, unit = _throughput(steps, steady)
    gpus = gpu_stats(session)
    gpu_present, gpu_statement = _gpu_statement(session, gpus)
    straggler = find_straggler(steps, phases, steady, window_steps, gpus)
    return SessionAnalysis(
        run_id=hello.run_id if hello else "",
        framework=hello.framework if hello else "unknown",
        strategy=hello.strategy if hello else "unknown",
        source=session.source,
        ranks=session.ranks,
        world_size=session.world_size,
        start_s=start_s,
        end_s=end_s,
        steps_total=n,
        steps_steady=int(steady.sum()),
        overall=overall,
        per_rank=per_rank,
        timeline=_timeline(steps, phases, start_s, end_s, bucket_s),
        throughput=throughput,
        throughput_unit=unit,
        comm_compute_ratio=(overall.seconds["comm_exposed"] / overall.seconds["compute"]
                            if overall.seconds["compute"] > 0 else None),
        gpu_present=gpu_present,
        gpu_statement=gpu_statement,
        gpus=gpus,
        checkpoints_s=_event_times(session, EventKind.CHECKPOINT_SAVED),
        restarts=len(_event_times(session, EventKind.RESTART)),
        errors=len(_event_times(session, EventKind.ERROR)),
        straggler=straggler,
        wait_diagnosis=_wait_diagnosis(overall, per_rank, straggler),
        data_quality=_data_quality(session),
    )


def find_straggler(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray,
                   window_steps: int = STRAGGLER_WINDOW_STEPS,
                   gpus: Sequence[GpuStats] = ()) -> Straggler | None:
    """The rank with the smallest exposed wait in most steps of a window, late by a real share of the step.

    The gap is the median exposed wait of the *other* ranks minus this rank's wait: with two ranks the median of all
    would halve the lateness. Returns the rank flagged in most windows, or None.
    """
    ranks = np.unique(steps["rank"][steady]).astype(int)
    if len(ranks) < 2:
        return None
    wait, _step_index, step_s = _per_step_matrix(steps, steady, ranks)
    if wait.shape[1] == 0:
        return None
    flagged: dict[int, list[tuple[float, float, float]]] = {}
    windows = 0
    for lo in range(0, wait.shape[1], window_steps):
        block = wait[:, lo:lo + window_steps]
        complete = ~np.isnan(block).any(axis=0)
        if complete.sum() < max(3, min(window_steps, block.shape[1]) // 2):
            continue
        windows += 1
        block = block[:, complete]
        mins = np.argmin(block, axis=0)
        counts = np.bincount(mins, minlength=len(ranks))
        top = int(np.argmax(counts))
        share = counts[top] / block.shape[1]
        others = np.delete(block, top, axis=0)
        gap = float(np.median(np.median(others, axis=0) - block[top]))
        median_step = float(np.nanmedian(step_s[:, lo:lo + window_steps]))
        gap_share = gap / median_step if median_step > 0 else 0.0
        if share >= STRAGGLER_MIN_SHARE_OF_STEPS and gap_share >= STRAGGLER_MIN_GAP_SHARE:
            flagged.setdefault(int(ranks[top]), []).append((share, gap, gap_share))
    if not flagged:
        return None
    rank = max(flagged, key=lambda r: len(flagged[r]))
    found = flagged[rank]
    gap_s = float(np.median([g for _, g, _ in found]))
    cause, detail = _straggler_cause(steps, phases, steady, rank, gap_s, gpus)
    return Straggler(rank=rank, windows_flagged=len(found), windows_total=windows,
                     min_share=float(np.mean([s for s, _, _ in found])), gap_s=gap_s,
                     gap_share=float(np.median([g for _, _, g in found])), cause=cause, cause_detail=detail)


def gpu_stats(session: SessionData) -> list[GpuStats]:
    """Utilization percentiles per (host, GPU index)."""
    gpu = session.gpu
    out: list[GpuStats] = []
    if len(gpu["ts_s"]) == 0:
        return out
    keys = sorted({(str(h), int(i)) for h, i in zip(gpu["host"], gpu["gpu_index"], strict=False)})
    for host, index in keys:
        mask = (gpu["host"] == host) & (gpu["gpu_index"] == index)
        util = gpu["util_pct"][mask]
        util = util[~np.isnan(util)]
        clock = gpu["sm_clock_mhz"][mask]
        clock = clock[~np.isnan(clock)]
        throttle = gpu["throttle_reasons"][mask]
        throttle = throttle[~np.isnan(throttle)]
        names = [n for n in gpu["name"][mask] if n]
        ranks = gpu["rank"][mask]
        ranks = ranks[~np.isnan(ranks)]
        pct = np.percentile(util, [5, 50, 95]) if len(util) else None
        out.append(GpuStats(
            host=host, gpu_index=index, name=str(names[0]) if names else None,
            rank=int(ranks[0]) if len(ranks) else None, samples=int(mask.sum()),
            util_mean=float(util.mean()) if len(util) else None,
            util_p5=float(pct[0]) if pct is not None else None,
            util_p50=float(pct[1]) if pct is not None else None,
            util_p95=float(pct[2]) if pct is not None else None,
            sm_clock_p50_mhz=float(np.median(clock)) if len(clock) else None,
            throttled_share=float((throttle > 0).mean()) if len(throttle) else None,
        ))
    return out


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _breakdown(steps: Columns, phases: dict[str, np.ndarray], mask: np.ndarray) -> Breakdown:
    count = int(mask.sum())
    if count == 0:
        return Breakdown(0, 0.0, dict.fromkeys(PHASE_NAMES, 0.0))
    step = float(np.nanmean(steps["step_s"][mask]))
    return Breakdown(count, step, {name: float(phases[name][mask].mean()) for name in PHASE_NAMES})


def _rank_summary(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray, rank: int) -> RankSummary:
    mine = steps["rank"] == rank
    mask = mine & steady
    throughput, unit = _throughput({k: v[mine] for k, v in steps.items()}, steady[mine])
    return RankSummary(rank=rank, breakdown=_breakdown(steps, phases, mask), steps_total=int(mine.sum()),
                       samples_per_s=throughput if unit == "samples/s" else None)


def _throughput(steps: Columns, steady: np.ndarray) -> tuple[float | None, str]:
    """Global samples/s over the steady span (steps/s of all ranks when samples were not reported)."""
    if not steady.any():
        return None, "samples/s"
    span = float(np.nanmax(steps["end_s"][steady]) - np.nanmin(steps["start_s"][steady]))
    if span <= 0:
        return None, "samples/s"
    samples = steps["samples"][steady]
    if np.isnan(samples).all():
        return float(steady.sum()) / span, "steps/s"
    return float(np.nansum(samples)) / span, "samples/s"


def _timeline(steps: Columns, phases: dict[str, np.ndarray], start_s: float, end_s: float,
              bucket_s: float | None) -> Timeline:
    span = max(end_s - start_s, 1e-9)
    if bucket_s is None:
        bucket_s = _nice_bucket(span / 60.0)
    count = max(1, int(np.ceil(span / bucket_s)))
    index = np.clip(((steps["end_s"] - start_s) // bucket_s).astype(np.int64), 0, count - 1) \
        if len(steps["end_s"]) else np.zeros(0, dtype=np.int64)
    per_bucket = np.bincount(index, minlength=count).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        phase_s = {name: np.bincount(index, weights=phases[name], minlength=count) / per_bucket
                   for name in PHASE_NAMES}
        step_s = np.bincount(index, weights=np.nan_to_num(steps["step_s"]), minlength=count) / per_bucket
    samples = steps["samples"]
    if len(samples) and not np.isnan(samples).all():
        throughput = np.bincount(index, weights=np.nan_to_num(samples), minlength=count) / bucket_s
        unit = "samples/s"
    else:
        throughput, unit = per_bucket / bucket_s, "steps/s"
    throughput = np.where(per_bucket > 0, throughput, np.nan)  # an empty bucket is a gap, not zero throughput
    return Timeline(bucket_s=bucket_s, start_s=np.arange(count) * bucket_s, phase_s=phase_s, step_s=step_s,
                    throughput=throughput, throughput_unit=unit)


def _nice_bucket(raw: float) -> float:
    for candidate in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if candidate >= raw:
            return float(candidate)
    return float(np.ceil(raw / 3600.0) * 3600.0)


def _per_step_matrix(steps: Columns, steady: np.ndarray, ranks: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exposed wait and step time as (rank x step index) matrices, NaN where a rank has no such step."""
    index = np.unique(steps["step"][steady])
    wait = np.full((len(ranks), len(index)), np.nan)
    step_s = np.full((len(ranks), len(index)), np.nan)
    row_of = {int(r): i for i, r in enumerate(ranks)}
    cols = np.searchsorted(index, steps["step"][steady])
    rows = np.array([row_of[int(r)] for r in steps["rank"][steady]], dtype=np.int64)
    wait[rows, cols] = steps["comm_exposed_s"][steady]
    step_s[rows, cols] = steps["step_s"][steady]
    return wait, index, step_s


def _straggler_cause(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray, rank: int, gap_s: float,
                     gpus: Sequence[GpuStats]) -> tuple[str, str]:
    """Attribute the lateness to the phase in which this rank exceeds the others' median."""
    mine = (steps["rank"] == rank) & steady
    ranks = [int(r) for r in np.unique(steps["rank"][steady]) if int(r) != rank]
    excess: dict[str, float] = {}
    for name in ("data_wait", "compute", "other"):
        others = [float(np.median(phases[name][(steps["rank"] == r) & steady])) for r in ranks]
        excess[name] = float(np.median(phases[name][mine])) - float(np.median(others))
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


def _hardware_evidence(rank: int, gpus: Sequence[GpuStats]) -> str:
    mine = [g for g in gpus if g.rank == rank]
    others = [g.sm_clock_p50_mhz for g in gpus if g.rank != rank and g.sm_clock_p50_mhz]
    for g in mine:
        if g.throttled_share and g.throttled_share > 0.2:
            return f"its GPU {g.host}:{g.gpu_index} reports throttle reasons in {g.throttled_share:.0%} of samples"
        if g.sm_clock_p50_mhz and others and g.sm_clock_p50_mhz < HARDWARE_CLOCK_RATIO * float(np.median(others)):
            return (f"its GPU {g.host}:{g.gpu_index} runs at {g.sm_clock_p50_mhz:.0f} MHz SM clock vs "
                    f"{float(np.median(others)):.0f} MHz on the others")
    return ""


def _wait_diagnosis(overall: Breakdown, per_rank: Sequence[RankSummary], straggler: Straggler | None) -> str:
    """What the exposed communication is mostly about: a straggler, the network, or nothing notable."""
    if straggler is not None:
        return "straggler"
    computes = [r.breakdown.seconds["compute"] for r in per_rank if r.breakdown.steps]
    if overall.steps == 0 or not computes:
        return "none"
    median = float(np.median(computes))
    even = median > 0 and max(abs(c - median) for c in computes) <= NETWORK_COMPUTE_SPREAD * median
    if overall.shares["comm_exposed"] >= 0.2 and even:
        return "network"
    return "none"


def _gpu_statement(session: SessionData, gpus: Sequence[GpuStats]) -> tuple[bool, str]:
    if gpus:
        return True, f"{len(gpus)} GPU(s) sampled"
    statuses = {str(s) for s in session.host["gpu_status"]}
    if GpuStatus.NO_GPU in statuses:
        hosts = sorted({str(h) for h in session.host["host"]})
        return False, f"No GPU: host(s) {', '.join(hosts)} report no GPU (CPU-only run)"
    if GpuStatus.NVML_ERROR in statuses:
        details = {str(d) for d in session.host["gpu_status_detail"] if d}
        return False, f"No GPU readings: NVML failed ({'; '.join(sorted(details)) or 'no detail'})"
    return False, "No GPU readings were received"


def _event_times(session: SessionData, kind: str) -> list[float]:
    """Times of one event kind, counting events of several ranks within 1 s (or at the same step) once."""
    times: list[float] = []
    seen_steps: set[int] = set()
    for event in sorted((e for e in session.events if e.event == kind), key=lambda e: e.ts_s):
        if event.step is not None and event.step in seen_steps:
            continue
        if times and event.step is None and event.ts_s - times[-1] < 1.0:
            continue
        if event.step is not None:
            seen_steps.add(event.step)
        times.append(event.ts_s)
    return times


def _data_quality(session: SessionData) -> DataQuality:
    counters = session.counters
    dropped = 0
    health = session.health
    if len(health["ts_s"]) and "agent_id" in health:
        for agent in {str(a) for a in health["agent_id"]}:
            values = health["dropped_records"][health["agent_id"] == agent]
            dropped += int(np.nanmax(values)) if len(values) else 0
    elif len(health["ts_s"]):
        dropped = int(np.nanmax(health["dropped_records"]))
    steps = session.steps
    missing = np.isnan(steps["data_wait_s"]) | np.isnan(steps["compute_s"]) | np.isnan(steps["comm_exposed_s"])
    rejected = counters.get("rejected", {})
    return DataQuality(gaps=int(counters.get("gaps", 0)), missing_messages=int(counters.get("missing_messages", 0)),
                       rejected=dict(rejected) if isinstance(rejected, dict) else {},
                       agent_dropped_records=dropped, steps_missing_phases=int(missing.sum()))
