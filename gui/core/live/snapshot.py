"""The frame-side half of the live store: the immutable ``Snapshot`` a GUI frame draws, and the heuristics that
turn the store's raw copy into it (per-rank recent means, idle share and cause, throughput, straggler).

What it owns: the ``Snapshot`` / ``GpuSeries`` / ``HostState`` / ``LiveStraggler`` types, the rank-state names, and
``build_snapshot`` (runs on the GUI thread, outside the store's lock, over arrays the store copied for it).

What it must never do: import Qt, touch the store's live buffers or lock, or turn a missing reading into 0 (NaN
stays NaN so the views can draw gaps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.ma  # np.percentile imports it on first use: 55 ms inside a run's first frame

from ringscope.agent.schema import GpuSample, GpuStatus, Hello
from ringscope.gui.core import phases
from ringscope.gui.core.analysis.straggler import judge_window

PHASES: Final[tuple[str, ...]] = tuple(phase.name for phase in phases.PHASES)
"""The step phases every chart stacks, in this order (other = step - data wait - compute - exposed comm)."""

STATE_RUNNING: Final = "running"
STATE_LOST: Final = "lost"
STATE_FINISHED: Final = "finished"
STATE_STOPPED: Final = "stopped"  # the run was stopped from the window, or its process failed: not lost


def readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True)
class LiveStraggler:
    """The rank the others wait for *now* (recent per-rank means), and why the heuristic thinks so (one sentence for
    the overview). The whole-session answer, per-step windows with the cause, is
    ``ringscope.gui.core.analysis.straggler.Straggler``."""

    rank: int
    others_wait_share: float  # how much of a step the other ranks wait in AllReduce beyond this rank
    reason: str
    cause: str = ""  # the phase it is late in: "data_wait" (its data loader), "compute", or "" (unclear)


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """Recent readings of one GPU (oldest first). ``util_pct`` / ``mem_used_bytes`` NaN where not supported."""

    host: str
    gpu_index: int
    name: str | None
    rank: int | None
    ts_s: np.ndarray
    util_pct: np.ndarray
    mem_used_bytes: np.ndarray
    mem_total_bytes: float  # NaN when unknown
    latest: GpuSample | None = None  # the last reading as received (uuid, power, temperature, clocks)


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """Many GPUs at a glance (``ringscope.gui.core.live.gpu_summary``): the latest utilization and memory per GPU (in
    ``Snapshot.gpus`` order) and the utilization band (5th/50th/95th percentile per 1 s bin, oldest first, 3 x
    ``WINDOW_S``) whose last bin ends at ``end_s`` (Unix s)."""

    util_pct: np.ndarray
    mem_pct: np.ndarray
    end_s: float
    band: np.ndarray


@dataclass(frozen=True, slots=True)
class HostState:
    """The latest reading of one host, with its CPU series (oldest first) for the no-GPU fallback chart."""

    host: str
    gpu_status: str
    gpu_status_detail: str | None
    gpu_count: int
    ts_s: np.ndarray
    cpu_pct: np.ndarray
    mem_used_bytes: float
    mem_total_bytes: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the store for one GUI frame. All per-rank arrays are in ``ranks`` order (sorted).

    Heat matrices are ranks x buckets (oldest bucket first); ``bucket_start_s`` is NaN for buckets not yet used.
    Per-rank ``recent_*`` figures are means over the last ``recent_window`` steps (first-batch steps excluded).
    """

    version: int
    now_s: float
    ranks: np.ndarray
    hosts: tuple[str, ...]
    state: tuple[str, ...]
    last_seen_s: np.ndarray
    current_step: np.ndarray
    recent_step_s: np.ndarray
    recent_data_wait_s: np.ndarray
    recent_compute_s: np.ndarray
    recent_comm_exposed_s: np.ndarray
    drops: np.ndarray
    gaps: np.ndarray
    bucket_s: float
    bucket_start_s: np.ndarray
    bucket_stamp: np.ndarray  # per bucket: changes whenever that bucket's heat column changes (views redo only those)
    heat_data_wait_share: np.ndarray
    heat_comm_exposed_share: np.ndarray
    cluster_phase_s: dict[str, np.ndarray]  # per bucket, mean over ranks, seconds; keys PHASES + "step"
    gpus: tuple[GpuSeries, ...]
    host_states: tuple[HostState, ...]
    framework: str
    strategy: str
    world_size: int
    started_s: float
    steps_per_s: float
    samples_per_s: float  # NaN when the agents do not report samples
    messages_per_s: float
    idle_share: float  # NaN until steps with compute times arrived
    idle_cause: str  # one of PHASES other than compute, or "" when unknown
    idle_cause_share: float
    straggler: LiveStraggler | None
    counters: dict[str, Any]
    steps_total: int
    latest_end_s: float
    step_pct_s: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # p50, p95, max over recent steps
    run_id: str = ""
    run_state: str = "running"
    ended_s: float = math.nan  # when the run ended (NaN while it runs): figures are frozen at that moment
    rank_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # steps received per rank
    rank_samples: np.ndarray = field(default_factory=lambda: np.zeros(0))  # samples per rank (NaN: not reported)
    gpu_summary: GpuSummary | None = None  # past gpu_summary.SUMMARY_ABOVE GPUs: what the GPU panel draws

    @property
    def no_gpu(self) -> bool:
        """True when hosts have reported and none has a GPU (the window then shows CPU instead)."""
        return bool(self.host_states) and not self.gpus and all(
            h.gpu_status != GpuStatus.OK or h.gpu_count == 0 for h in self.host_states)

    @property
    def ended(self) -> bool:
        """True once the run is over (its figures no longer move)."""
        return math.isfinite(self.ended_s)

    @property
    def elapsed_s(self) -> float:
        """Seconds from the earliest agent's start to now, or to the run's end (NaN before any hello)."""
        end = self.ended_s if self.ended else self.now_s
        return end - self.started_s if math.isfinite(self.started_s) else math.nan

    def straggler_row(self) -> int | None:
        """Index of the straggler in ``ranks`` (None when there is none)."""
        if self.straggler is None:
            return None
        hits = np.flatnonzero(self.ranks == self.straggler.rank)
        return int(hits[0]) if hits.size else None



# ---- Snapshot building (GUI thread, outside the lock) ----------------------------------------------------------


def build_snapshot(raw: dict[str, Any], now: float, bucket_s: float, lost_timeout_s: float) -> Snapshot:
    """Turn the store's locked copy (``LiveStore._copy_locked``) into the frame's immutable ``Snapshot``.

    Once the run ended (``raw["ended"]``: its state and when), the figures are frozen at its end: throughput is the
    rate of its last seconds, the straggler verdict counts every rank, and ranks that did not say goodbye show the
    run's end (stopped) instead of turning lost after the timeout.
    """
    ended_state, ended_s = raw.get("ended") or ("", math.nan)
    ended = math.isfinite(ended_s)
    recent, valid = raw["recent"], raw["valid"]
    keep = valid & (recent["first_batch"] == 0)
    # the four per-rank means in one pass over a (4, ranks, window) stack, not four nanmean calls
    stacked = np.stack([recent[n] for n in ("step_s", "data_wait_s", "compute_s", "comm_exposed_s")])
    counted = keep[None] & ~np.isnan(stacked)
    totals = np.where(counted, stacked, 0.0).sum(axis=2, dtype=np.float64)
    counts = counted.sum(axis=2)
    with np.errstate(all="ignore"):
        means = np.where(counts > 0, totals / counts, np.nan)
    r_step, r_data, r_comp, r_comm = means[0], means[1], means[2], means[3]
    heat = raw["heat"]
    cluster = raw["cluster"]
    bucket_start = np.where(raw["bucket_abs"] >= 0, raw["bucket_abs"] * bucket_s, np.nan)
    last_seen = raw["last_seen_s"]
    # an ended run's ranks are judged at its end: the ones silent then were lost, the others ended with the run
    silent = (ended_s if ended else now) - last_seen > lost_timeout_s
    if ended and ended_state != STATE_LOST:
        silent = np.zeros_like(silent)  # a stopped or finished run loses nobody: its ranks ended with it
    codes = np.where(raw["finished"] > 0, 2, np.where(silent, 1, 3 if ended else 0))
    names = (STATE_RUNNING, STATE_LOST, STATE_FINISHED, STATE_STOPPED)
    state = tuple(names[c] for c in codes.tolist())
    idle, cause, cause_share = _idle_cause(r_step, r_data, r_comp, r_comm)
    # an ended run's throughput is the rate of its last seconds, not a rate that decays to 0 as time passes
    rate_now = min(now, ended_s + bucket_s) if ended else now
    steps_per_s, samples_per_s = _throughput(raw, rate_now, bucket_s)
    step_pct = _step_percentiles(recent["step_s"], keep)
    candidates = np.ones(codes.size, bool) if ended else codes == 0  # who may be "the rank the others wait for"
    hellos: list[Hello] = raw["hellos"]
    first = hellos[0] if hellos else None
    # agents announce the ranks in sync (a MirroredStrategy process counts its replicas): never multiply
    world = max([h.world_size for h in hellos] + [len(state)])
    return Snapshot(
        version=raw["version"], now_s=now, ranks=readonly(raw["ranks"]), hosts=raw["hosts"], state=state,
        last_seen_s=readonly(last_seen), current_step=readonly(raw["current_step"]),
        recent_step_s=readonly(r_step), recent_data_wait_s=readonly(r_data), recent_compute_s=readonly(r_comp),
        recent_comm_exposed_s=readonly(r_comm), drops=readonly(raw["drops"]), gaps=readonly(raw["gaps"]),
        bucket_s=bucket_s, bucket_start_s=readonly(bucket_start),
        bucket_stamp=readonly(raw["bucket_stamp"]),
        heat_data_wait_share=readonly(heat["data_wait_s"]),
        heat_comm_exposed_share=readonly(heat["comm_exposed_s"]),
        cluster_phase_s={k: readonly(v.astype(np.float64)) for k, v in cluster.items()},
        gpus=raw["gpus"], host_states=raw["hosts_state"], gpu_summary=raw.get("gpu_summary"),
        framework=first.framework if first else "", strategy=first.strategy if first else "", world_size=world,
        started_s=min((h.started_s for h in hellos), default=math.nan),
        steps_per_s=steps_per_s, samples_per_s=samples_per_s,
        messages_per_s=_rate(raw["sec_abs"], raw["sec_msgs"], now),
        idle_share=idle, idle_cause=cause, idle_cause_share=cause_share,
        # while the run goes on, lost or finished ranks are not "the rank the others wait for" any more; once it
        # ended, the verdict over every rank's last steps is the run's final one
        straggler=raw["straggler"] if "straggler" in raw else find_live_straggler(
            raw["ranks"], np.where(keep, recent["step_s"], np.nan),
            np.where(keep & candidates[:, None], recent["comm_exposed_s"], np.nan), r_data, r_comp),
        counters=raw["counters"], steps_total=raw["steps_total"], latest_end_s=raw["latest_end_s"],
        step_pct_s=step_pct, run_id=raw.get("run_id", ""), run_state=ended_state or raw.get("run_state", "running"),
        ended_s=ended_s, rank_steps=readonly(raw["rank_steps"]), rank_samples=readonly(raw["rank_samples"]),
    )


def _step_percentiles(step_s: np.ndarray, keep: np.ndarray) -> tuple[float, float, float]:
    """p50, p95 and max over every recent step of every rank (not over per-rank means, which hide the tail)."""
    values = step_s[keep & ~np.isnan(step_s)]
    if not values.size:
        return math.nan, math.nan, math.nan
    p50, p95 = np.percentile(values, [50, 95])
    return float(p50), float(p95), float(values.max())


def _idle_cause(step: np.ndarray, data: np.ndarray, comp: np.ndarray, comm: np.ndarray) -> tuple[float, str, float]:
    ok = ~np.isnan(step) & ~np.isnan(comp)
    total = float(step[ok].sum())
    if not ok.any() or total <= 0:
        return math.nan, "", math.nan
    parts = {"data_wait": float(np.nan_to_num(data[ok]).sum()), "comm_exposed": float(np.nan_to_num(comm[ok]).sum())}
    parts["other"] = max(total - float(comp[ok].sum()) - parts["data_wait"] - parts["comm_exposed"], 0.0)
    idle = max(0.0, 1.0 - float(comp[ok].sum()) / total)
    cause = max(parts, key=lambda k: parts[k])
    return idle, cause, parts[cause] / total


def _throughput(raw: dict[str, Any], now: float, bucket_s: float, window: int = 5) -> tuple[float, float]:
    current = math.floor(now / bucket_s)
    in_window = (raw["bucket_abs"] >= current - window) & (raw["bucket_abs"] < current)
    used = in_window & (raw["bucket_steps"] > 0)
    if not used.any():
        # 0 only when the steps stopped (every bucket with steps is before the window); none yet, or all in the
        # current, incomplete bucket (a run's first second): no rate yet, which is not 0 steps/s
        with_steps = raw["bucket_steps"] > 0
        stopped = with_steps.any() and not with_steps[raw["bucket_abs"] >= current].any()
        return (0.0 if stopped else math.nan), math.nan
    # divide by the time actually covered, so a training that just started is not under-reported
    seconds = (current - int(raw["bucket_abs"][used].min())) * bucket_s
    steps = float(raw["bucket_steps"][in_window].sum())
    samples = float(raw["bucket_samples"][in_window].sum())
    return steps / seconds, (samples / seconds if samples > 0 else math.nan)


def _rate(seconds_abs: np.ndarray, counts: np.ndarray, now: float, window: int = 5) -> float:
    current = int(now)
    in_window = (seconds_abs >= current - window) & (seconds_abs < current)
    used = in_window & (counts > 0)
    if not used.any():
        return 0.0
    return float(counts[in_window].sum()) / (current - int(seconds_abs[used].min()))


def find_live_straggler(ranks: np.ndarray, step_s: np.ndarray, comm_exposed_s: np.ndarray,
                        data_wait_s: np.ndarray, compute_s: np.ndarray | None = None) -> LiveStraggler | None:
    """The rank the others wait for now, by the same rule as the whole-run analysis (``judge_window``).

    ``step_s`` / ``comm_exposed_s`` are (rank x recent step) matrices (a 1-D array is one step per rank); a row of
    NaN is a rank that is not a candidate (lost or finished while the run goes on). In synchronous data parallelism
    the slowest rank waits least in AllReduce. Its cause is the phase (per-rank means ``data_wait_s`` /
    ``compute_s``) in which it spends more than the others, not the phase's absolute size: when every rank waits for
    data, data is not what makes this one late.
    """
    if len(ranks) < 2:
        return None
    wait = comm_exposed_s.reshape(len(ranks), -1).astype(np.float64)
    verdict = judge_window(wait, step_s.reshape(len(ranks), -1).astype(np.float64))
    if verdict is None:
        return None
    worst, gap, share = verdict.row, verdict.gap_s, verdict.gap_share  # share: of the median step
    others = np.delete(np.arange(len(ranks)), worst)
    why, cause = "cause unclear: neither its data wait nor its compute stands out", ""
    for phase, name, values in (("its data loader", "data_wait", data_wait_s),
                                ("slower compute", "compute", compute_s)):
        if values is None or np.isnan(values[worst]) or np.isnan(values[others]).all():
            continue
        if values[worst] - float(np.nanmedian(values[others])) >= 0.5 * gap:
            why, cause = phase, name
            break
    return LiveStraggler(int(ranks[worst]), share, f"rank {int(ranks[worst])} ({why}): the others wait {share:.0%} "
                                               f"of each step for it in AllReduce", cause)
