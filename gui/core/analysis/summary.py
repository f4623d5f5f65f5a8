"""Where did the step time go? Phase shares, throughput, GPU statistics, checkpoints and data quality of a session.

This module owns the numbers every report, the cost model and the recommendations are built on, following
shared/MEASURING.md, and ``analyze``, which assembles them into one ``SessionAnalysis``. Straggler detection and the
exposed-wait diagnosis live in ``ringscope.gui.core.analysis.straggler``; their names are re-exported here so importers
keep one place to import from. It takes a ``SessionData`` (live or recorded) and returns plain frozen dataclasses. It
must never import Qt or an ML framework, and never invent a value: a phase that was not measured is counted in the
data quality section, and a missing GPU is stated, not shown as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from ringscope.agent.schema import EventKind, GpuStatus
from ringscope.gui.core.analysis.network import NetworkFindings, network_findings
from ringscope.gui.core.analysis.straggler import (
    HARDWARE_CLOCK_RATIO,
    NETWORK_COMPUTE_SPREAD,
    STRAGGLER_MIN_GAP_SHARE,
    STRAGGLER_MIN_SHARE_OF_STEPS,
    STRAGGLER_WINDOW_STEPS,
    Straggler,
    diagnose_wait,
    find_straggler,
)
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.session_data import Columns, SessionData, distinct

__all__ = [
    "HARDWARE_CLOCK_RATIO", "NETWORK_COMPUTE_SPREAD", "OTHER_RESOLUTION_S", "PHASE_NAMES", "STRAGGLER_MIN_GAP_SHARE",
    "STRAGGLER_MIN_SHARE_OF_STEPS", "STRAGGLER_WINDOW_STEPS", "WARMUP_STEPS", "Breakdown", "DataQuality", "GpuStats",
    "RankSummary", "SessionAnalysis", "Straggler", "Timeline", "analyze", "find_straggler", "gpu_stats",
    "phase_seconds", "steady_mask",
]

WARMUP_STEPS: Final[int] = 3
"""Steps per rank kept out of steady-state figures after the first batch (compilation, caches, allocator)."""
OTHER_RESOLUTION_S: Final[float] = 1e-6
"""A step's unattributed remainder ("other") smaller than this counts as 0."""

PHASE_NAMES: Final[tuple[str, ...]] = tuple(p.name for p in PHASES)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Mean seconds per step of each phase over some set of steps; ``shares`` are fractions of the mean step."""

    steps: int
    step_s: float
    seconds: dict[str, float]
    unmeasured_s: float = 0.0  # mean seconds per step of steps whose phases were not measured (Keras fit)

    @property
    def shares(self) -> dict[str, float]:
        """Fraction of step time per phase (0 when there were no steps)."""
        return {k: (v / self.step_s if self.step_s > 0 else 0.0) for k, v in self.seconds.items()}

    @property
    def phases_measured(self) -> bool:
        """False when no step had its phases measured (a Keras ``fit`` run): shares are then unknown, not 0."""
        return self.steps > 0 and self.unmeasured_s < self.step_s * (1 - 1e-9)

    @property
    def idle_share(self) -> float:
        """Share of step time not computing (data wait + exposed comm + other); NaN when phases were not measured.

        Time of steps whose phases are unknown is never counted as idle: unknown stays unknown.
        """
        if not self.steps:
            return 0.0
        if not self.phases_measured:
            return float("nan")
        idle = sum(v for k, v in self.seconds.items() if k != "compute")
        return idle / self.step_s if self.step_s > 0 else 0.0


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
    network: NetworkFindings | None = None  # per-host link figures (ringscope.gui.core.analysis.network)

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
    """Per step, seconds of each phase, plus ``unmeasured``: the whole step when its compute time is unknown.

    A step without a compute time (Keras ``fit`` brackets data, compute and all-reduce together) is not split:
    its phases are 0 and its time is ``unmeasured`` — never ``other``, so it is never priced as waiting. In a
    measured step a single missing phase counts 0 and ``other`` absorbs it (clipped at 0).
    """
    step = np.nan_to_num(steps["step_s"], nan=0.0)
    measured = ~np.isnan(np.asarray(steps["compute_s"], dtype=np.float64))
    data = np.where(measured, np.nan_to_num(steps["data_wait_s"], nan=0.0), 0.0)
    compute = np.where(measured, np.nan_to_num(steps["compute_s"], nan=0.0), 0.0)
    comm = np.where(measured, np.nan_to_num(steps["comm_exposed_s"], nan=0.0), 0.0)
    other = np.where(measured, step - data - compute - comm, 0.0)
    # Below a microsecond the remainder is float rounding of the subtraction, not time (it showed up as "3e-15 %").
    other[other < OTHER_RESOLUTION_S] = 0.0
    return {"data_wait": data, "compute": compute, "comm_exposed": comm, "other": other,
            "unmeasured": np.where(measured, 0.0, step)}


def steady_mask(steps: Columns, warmup_steps: int = WARMUP_STEPS) -> np.ndarray:
    """Steps kept for steady-state figures: not a first batch, and not among a rank's first ``warmup_steps``.

    Never drops more than half of a rank's steps, so a short session still has figures.
    """
    # first_batch is a 0/1 float column (NaN when not sent: not a first batch).
    keep = ~(np.nan_to_num(np.asarray(steps["first_batch"], dtype=np.float64), nan=0.0) > 0)
    ranks = np.asarray(steps["rank"], dtype=np.float64)
    if not len(ranks):
        return keep
    # every rank's steps in step order (ties in arrival order), then each rank's first ``skip`` of its run
    order = np.lexsort((np.asarray(steps["step"], dtype=np.float64), ranks))
    grouped = ranks[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])  # NaN ranks: groups of one, never skipped
    sizes = np.diff(np.r_[starts, len(order)])
    skips = np.minimum(warmup_steps, sizes // 2)
    position = np.arange(len(order)) - np.repeat(starts, sizes)
    keep[order[position < np.repeat(skips, sizes)]] = False
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
    per_rank = _rank_summaries(steps, phases, steady)
    throughput, unit = _throughput(steps, steady)
    gpus = gpu_stats(session)
    gpu_present, gpu_statement = _gpu_statement(session, gpus)
    straggler = find_straggler(steps, phases, steady, window_steps, gpus)
    network = network_findings(session, steady)
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
        wait_diagnosis=diagnose_wait(straggler, overall.shares["comm_exposed"],
                                     [r.breakdown.seconds["compute"] for r in per_rank if r.breakdown.steps],
                                     links_congested=network.congested, step_s=overall.step_s),
        data_quality=_data_quality(session),
        network=network,
    )


def gpu_stats(session: SessionData) -> list[GpuStats]:
    """Utilization percentiles per (host, GPU index), in (host, index) order.

    One pass over the rows, whatever their order: the rows are grouped by GPU once (a mask per GPU cost O(GPUs x
    rows): at 2 048 GPUs x 40 readings 2 s, at 8 192 x 600 readings hours, on the live analyzer's thread), then
    every figure is a grouped reduction. The percentiles are numpy's default (linear) method, per GPU."""
    gpu = session.gpu
    count = len(gpu["ts_s"])
    if count == 0:
        return []
    group, keys = _gpu_groups(np.asarray(gpu["host"], dtype=object), np.asarray(gpu["gpu_index"]))
    groups = len(keys)
    samples = np.bincount(group, minlength=groups)
    util = np.asarray(gpu["util_pct"], dtype=np.float64)
    util_q = _group_percentiles(group, util, groups, (5.0, 50.0, 95.0))
    have_util = ~np.isnan(util)
    util_n = np.bincount(group[have_util], minlength=groups)
    with np.errstate(all="ignore"):
        util_mean = np.bincount(group[have_util], weights=util[have_util], minlength=groups) / util_n
    (clock_p50,) = _group_percentiles(group, np.asarray(gpu["sm_clock_mhz"], dtype=np.float64), groups, (50.0,))
    throttle = np.asarray(gpu["throttle_reasons"], dtype=np.float64)
    have_throttle = ~np.isnan(throttle)
    throttle_n = np.bincount(group[have_throttle], minlength=groups)
    with np.errstate(all="ignore"):
        throttled = (np.bincount(group[have_throttle], weights=throttle[have_throttle] > 0, minlength=groups)
                     / throttle_n)
    names = np.asarray(gpu["name"], dtype=object)
    named = np.flatnonzero(np.fromiter((bool(n) for n in names), bool, count))
    first_name = _first_per_group(group, named, groups)
    rank_col = np.asarray(gpu["rank"], dtype=np.float64)
    first_rank = _first_per_group(group, np.flatnonzero(~np.isnan(rank_col)), groups)

    def value(array: np.ndarray, i: int) -> float | None:
        return None if np.isnan(array[i]) else float(array[i])

    return [GpuStats(host=host, gpu_index=index, name=str(names[first_name[i]]) if first_name[i] >= 0 else None,
                     rank=int(rank_col[first_rank[i]]) if first_rank[i] >= 0 else None, samples=int(samples[i]),
                     util_mean=value(util_mean, i), util_p5=value(util_q[0], i), util_p50=value(util_q[1], i),
                     util_p95=value(util_q[2], i), sm_clock_p50_mhz=value(clock_p50, i),
                     throttled_share=value(throttled, i))
            for i, (host, index) in enumerate(keys)]


def _gpu_groups(hosts: np.ndarray, indexes: np.ndarray) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """Each row's GPU as a group number, and the groups' (host, index) in sorted order (group i is keys[i]).

    Rows usually come as runs of one GPU (a GPU's readings together): only the first row of each run is looked up
    in a dict, then the runs' numbers are repeated."""
    count = len(hosts)
    change = np.ones(count, bool)
    if count > 1:
        change[1:] = (hosts[1:] != hosts[:-1]) | (indexes[1:] != indexes[:-1])
    starts = np.flatnonzero(change)
    run_keys = [(str(h), int(i)) for h, i in zip(hosts[starts].tolist(), indexes[starts].tolist(), strict=True)]
    keys = sorted(set(run_keys))
    number = {key: i for i, key in enumerate(keys)}
    run_group = np.fromiter((number[key] for key in run_keys), np.int64, len(run_keys))
    return np.repeat(run_group, np.diff(np.append(starts, count))), keys


def _group_percentiles(group: np.ndarray, values: np.ndarray, groups: int,
                       percents: tuple[float, ...]) -> list[np.ndarray]:
    """Per group, ``np.percentile(values[group == g & ~isnan], percents)`` (linear method), NaN for a group with no
    value: one sort by (group, value) for all groups."""
    have = ~np.isnan(values)
    group, values = group[have], values[have]
    order = np.lexsort((values, group))
    ordered = values[order]
    n = np.bincount(group, minlength=groups)
    start = np.cumsum(n) - n
    out = []
    for percent in percents:
        result = np.full(groups, np.nan)
        some = n > 0
        virtual = (percent / 100) * (n[some] - 1)  # numpy's linear method: the virtual index q (n - 1)
        below = np.floor(virtual)
        gamma = virtual - below
        low = start[some] + below.astype(np.int64)
        high = start[some] + np.minimum(below.astype(np.int64) + 1, n[some] - 1)
        a, b = ordered[low], ordered[high]
        diff = b - a
        # numpy's _lerp: from the nearer end, so that a percentile of equal values is exactly that value
        result[some] = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
        out.append(result)
    return out


def _first_per_group(group: np.ndarray, rows: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the first of ``rows`` (ascending row numbers) that belongs to it, or -1."""
    first = np.full(groups, -1, np.int64)
    if rows.size:
        taken, at = np.unique(group[rows], return_index=True)  # return_index: each group's first occurrence
        first[taken] = rows[at]
    return first


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _breakdown(steps: Columns, phases: dict[str, np.ndarray], mask: np.ndarray) -> Breakdown:
    count = int(mask.sum())
    if count == 0:
        return Breakdown(0, 0.0, dict.fromkeys(PHASE_NAMES, 0.0))
    step = float(np.nanmean(steps["step_s"][mask]))
    return Breakdown(count, step, {name: float(phases[name][mask].mean()) for name in PHASE_NAMES},
                     unmeasured_s=float(phases["unmeasured"][mask].mean()))


def _rank_summaries(steps: Columns, phases: dict[str, np.ndarray], steady: np.ndarray) -> list[RankSummary]:
    """Every rank's steady figures in one pass of ``bincount`` over the rows (a mask per rank cost O(ranks x rows):
    seconds for a 1-hour, 256-rank session). The same figures ``_breakdown`` / ``_throughput`` give for one rank."""
    if not len(steps["rank"]):
        return []
    ranks = distinct(steps["rank"])
    index = np.searchsorted(ranks, steps["rank"])  # = np.unique's inverse (a NaN rank sorts last, as one value)
    n = len(ranks)

    def total(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(index[mask], weights=values[mask], minlength=n)

    counts = np.bincount(index[steady], minlength=n)
    step = np.asarray(steps["step_s"], dtype=np.float64)
    have_step = steady & ~np.isnan(step)
    step_sums, step_counts = total(step, have_step), np.bincount(index[have_step], minlength=n)
    sums = {name: total(phases[name], steady) for name in (*PHASE_NAMES, "unmeasured")}
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, index[steady], np.nan_to_num(steps["start_s"][steady], nan=np.inf))
    np.maximum.at(last, index[steady], np.nan_to_num(steps["end_s"][steady], nan=-np.inf))
    samples = np.asarray(steps["samples"], dtype=np.float64)
    have_samples = steady & ~np.isnan(samples)
    sample_sums, sample_counts = total(samples, have_samples), np.bincount(index[have_samples], minlength=n)
    totals = np.bincount(index, minlength=n)
    out = []
    for i, rank in enumerate(ranks.tolist()):
        count = int(counts[i])
        if count == 0:
            breakdown = Breakdown(0, 0.0, dict.fromkeys(PHASE_NAMES, 0.0))
        else:
            mean_step = float(step_sums[i] / step_counts[i]) if step_counts[i] else float("nan")
            breakdown = Breakdown(count, mean_step, {name: float(sums[name][i] / count) for name in PHASE_NAMES},
                                  unmeasured_s=float(sums["unmeasured"][i] / count))
        span = float(last[i] - first[i])
        per_s = float(sample_sums[i]) / span if count and span > 0 and sample_counts[i] else None
        out.append(RankSummary(rank=int(rank), breakdown=breakdown, steps_total=int(totals[i]), samples_per_s=per_s))
    return out


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
        amounts, unit = np.nan_to_num(np.asarray(samples, dtype=np.float64)), "samples/s"
    else:
        amounts, unit = np.ones(len(steps["end_s"])), "steps/s"
    throughput = _bucket_rate(steps, amounts, start_s, end_s, bucket_s, count)
    return Timeline(bucket_s=bucket_s, start_s=np.arange(count) * bucket_s, phase_s=phase_s, step_s=step_s,
                    throughput=throughput, throughput_unit=unit)


def _bucket_rate(steps: Columns, amounts: np.ndarray, start_s: float, end_s: float, bucket_s: float,
                 count: int) -> np.ndarray:
    """Per bucket: the amount (samples or steps) done per second of the time the bucket covers.

    Each step's amount is spread over the buckets its ``[start_s, end_s]`` overlaps, in proportion to the overlap.
    Counting a whole step in the bucket its end falls in made steady steps read as periodic spikes (a bucket got
    one step more or less whenever steps straddled its edges). A bucket no step overlaps is NaN: a gap, not 0.
    """
    rate = np.zeros(count)
    covered = np.zeros(count)
    begin = np.asarray(steps["start_s"], dtype=np.float64) - start_s
    finish = np.asarray(steps["end_s"], dtype=np.float64) - start_s
    valid = np.isfinite(begin) & np.isfinite(finish)
    begin, finish, amounts = begin[valid], np.maximum(finish[valid], begin[valid]), amounts[valid]
    if len(begin):
        duration = finish - begin
        first = np.clip((begin // bucket_s).astype(np.int64), 0, count - 1)
        last = np.clip((finish // bucket_s).astype(np.int64), 0, count - 1)
        active = np.arange(len(begin))
        for offset in range(int((last - first).max()) + 1):  # most steps lie in 1 or 2 buckets
            active = active[last[active] - first[active] >= offset]
            bucket = first[active] + offset
            overlap = np.clip(np.minimum(finish[active], (bucket + 1) * bucket_s)
                              - np.maximum(begin[active], bucket * bucket_s), 0.0, None)
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(duration[active] > 0, overlap / duration[active], 1.0)
            rate += np.bincount(bucket, weights=amounts[active] * share, minlength=count)
            covered += np.bincount(bucket, weights=(overlap > 0) | (duration[active] == 0), minlength=count)
    span = max(end_s - start_s, 1e-9)
    edges = np.arange(count) * bucket_s
    seconds = np.clip(np.minimum(edges + bucket_s, span) - edges, 1e-9, None)  # the last bucket may be partial
    return np.where(covered > 0, rate / seconds, np.nan)


def _nice_bucket(raw: float) -> float:
    for candidate in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if candidate >= raw:
            return float(candidate)
    return float(np.ceil(raw / 3600.0) * 3600.0)


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
