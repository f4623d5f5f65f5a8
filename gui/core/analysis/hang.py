"""Hang detection: a run whose ranks stopped completing steps, the rank(s) that did not reach the collective, and
where they are stuck.

In synchronous data parallelism one rank that stops (a deadlock, an uneven number of batches, a dead data worker,
an exception swallowed in one rank) makes every other rank wait in the all-reduce until the collective times out,
10–30 minutes later, with every GPU billed. Each agent's heartbeat says where its rank is (data wait, compute,
in the collective since *t*, checkpoint, idle) even when no step completes; this module turns the latest heartbeats
and the last completed steps into a verdict.

It owns the threshold rule (``hang_threshold_s``) and ``judge_hang``. It must never import Qt, never decide a hang
without evidence that the ranks are alive (a silent rank is *lost*, not hung), and never name a rank as stuck when
its position is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

MIN_THRESHOLD_S: Final[float] = 10.0
STEP_MULTIPLE: Final[float] = 20.0
"""A run is hung when no rank completed a step for max(``MIN_THRESHOLD_S``, ``STEP_MULTIPLE`` x median step)."""

IN_COLLECTIVE: Final = "collective"
PHASES: Final[tuple[str, ...]] = ("data_wait", "compute", IN_COLLECTIVE, "checkpoint", "idle", "unknown")
"""Where a heartbeat says its rank is."""


@dataclass(frozen=True, slots=True)
class RankPosition:
    """Where one rank is, by its latest heartbeat."""

    rank: int
    phase: str
    since_s: float
    step: int | None
    bucket: int | None = None
    heard_s: float = math.nan  # when the heartbeat was received
    stack: str | None = None


@dataclass(frozen=True, slots=True)
class HangVerdict:
    """A hung run: since when no step completed, who did not arrive, who waits, what it costs."""

    stalled_since_s: float
    threshold_s: float
    stuck: tuple[RankPosition, ...]  # ranks not in the collective (the ones the others wait for)
    waiting: tuple[RankPosition, ...]  # ranks waiting in the collective
    unknown: tuple[int, ...]  # ranks alive but without a position (agents without heartbeats)
    devices: int
    stacks: dict[int, str] = field(default_factory=dict)
    finished: tuple[int, ...] = ()  # ranks that already said goodbye while the others wait (uneven batches)

    def waited_s(self, now_s: float) -> float:
        """How long the waiting ranks have been in the collective (the longest of them)."""
        since = [p.since_s for p in self.waiting if math.isfinite(p.since_s)]
        return max(0.0, now_s - min(since)) if since else max(0.0, now_s - self.stalled_since_s)

    def device_hours(self, now_s: float) -> float:
        """Device-hours burnt since the run stalled (every device of the run is held)."""
        return self.devices * max(0.0, now_s - self.stalled_since_s) / 3600.0

    def summary(self, now_s: float) -> str:
        """One sentence for the window, the reports and ``ringscope info``."""
        stalled = max(0.0, now_s - self.stalled_since_s)
        if self.finished and self.waiting and not self.stuck:
            names = ", ".join(f"rank {r}" for r in self.finished)
            return (f"hung for {stalled:.0f} s: {names} finished (said goodbye) while {len(self.waiting)} rank(s) "
                    f"wait in AllReduce for {self.waited_s(now_s):.0f} s — an uneven number of batches per rank?")
        if self.stuck:
            names = ", ".join(f"rank {p.rank} ({_where(p)})" for p in self.stuck)
            others = (f"; {len(self.waiting)} rank(s) wait in AllReduce for {self.waited_s(now_s):.0f} s"
                      if self.waiting else "")
            return f"hung for {stalled:.0f} s: {names} did not reach the collective{others}"
        if self.waiting:
            return (f"hung for {stalled:.0f} s: every rank waits in the collective (bucket or process group "
                    f"mismatch, the network, or a rank outside this job)")
        return f"hung for {stalled:.0f} s: no step completes and the ranks' positions are unknown"


# ---- Public API ---------------------------------------------------------------------------------------------------


def hang_threshold_s(median_step_s: float, minimum_s: float = MIN_THRESHOLD_S,
                     multiple: float = STEP_MULTIPLE) -> float:
    """Seconds without a completed step after which a run counts as hung."""
    if not math.isfinite(median_step_s) or median_step_s <= 0:
        return minimum_s
    return max(minimum_s, multiple * median_step_s)


def judge_hang(*, now_s: float, last_step_end_s: float, median_step_s: float, alive_ranks: set[int],
               positions: Mapping[int, RankPosition], devices: int, minimum_s: float = MIN_THRESHOLD_S,
               multiple: float = STEP_MULTIPLE, finished_ranks: set[int] | None = None) -> HangVerdict | None:
    """The verdict, or None while the run progresses (or before its first step).

    Args:
        now_s: the clock (Unix seconds).
        last_step_end_s: the latest end of a completed step over all ranks (NaN before the first).
        median_step_s: the run's recent median step time.
        alive_ranks: ranks whose agents were heard from within the lost timeout (heartbeats count).
        positions: the latest heartbeat position of each rank.
        devices: devices held by the run (for the cost of waiting).
        finished_ranks: ranks that said goodbye (the others may wait for them forever).
    """
    if not math.isfinite(last_step_end_s) or not alive_ranks:
        return None
    threshold = hang_threshold_s(median_step_s, minimum_s, multiple)
    if now_s - last_step_end_s <= threshold:
        return None
    stuck, waiting, unknown = [], [], []
    for rank in sorted(alive_ranks):
        position = positions.get(rank)
        if position is None or position.phase == "unknown":
            unknown.append(rank)
        elif position.phase == IN_COLLECTIVE:
            waiting.append(position)
        else:
            stuck.append(position)
    return HangVerdict(stalled_since_s=last_step_end_s, threshold_s=threshold, stuck=tuple(stuck),
                       waiting=tuple(waiting), unknown=tuple(unknown), devices=devices,
                       stacks={p.rank: p.stack for p in stuck if p.stack},
                       finished=tuple(sorted(finished_ranks or ())))


def _where(position: RankPosition) -> str:
    step = f", step {position.step}" if position.step is not None else ""
    return f"in {position.phase.replace('_', ' ')}{step}"
