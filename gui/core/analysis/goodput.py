"""Goodput: the share of a run's paid wall time that went into training steps that were kept, and where the rest went.

The one definition, for the window, the reports, ``ringscope info`` and the metrics (README, "Definitions")::

    goodput = productive seconds / wall seconds of the run

The run's wall time, from its first attempt's start to its last attempt's end, is cut into parts that add up to it
exactly (``CAUSES``), each attempt in turn:

* ``startup``: attempt start -> its first step (process start, imports, rendezvous, data-loader start-up), plus the
  tail after its last step when it ended by itself (shutdown);
* ``checkpoint``: checkpoint saves (during its steps) and restores (during its start-up), as the agents timed them;
* ``redone``: steps an earlier attempt had already completed (work lost since the last checkpoint, done again);
* ``data_wait`` / ``allreduce_stall``: of the kept steps, the time ranks waited for the input pipeline and for the
  gradient AllReduce (exposed communication), averaged over ranks (the same figures as the window's waiting);
* ``productive``: the rest of the kept steps' time;
* ``hang_undetected``: from the last step of an attempt that hung to the hang verdict;
* ``detect_to_restart``: from the fault's detection (the hang verdict, or the attempt's last step for a failure or
  a lost rank) to the next attempt's start (evidence, stopping every process, the restart delay).

Anchor: Google's ``ml-goodput-measurement`` defines goodput as productive training time over total job time, with
badput by cause (initialization, checkpointing, wasted progress after a disruption, ...). Ours differs in three ways:
it is measured from the ranks' own step telemetry instead of from logged markers; it also counts the waiting inside
kept steps (input pipeline, AllReduce stall) as badput, as Ringscope's purpose is to find it; and a hang's
detection delay is its own cause. Never imports Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import EventKind
from ringscope.gui.core.analysis.attempts import Attempt, attempts_of, attempts_of_agents, step_attempts
from ringscope.gui.core.session_data import SessionData

PRODUCTIVE: Final = "productive"
CAUSES: Final[tuple[str, ...]] = (PRODUCTIVE, "data_wait", "allreduce_stall", "checkpoint", "hang_undetected",
                                  "detect_to_restart", "startup", "redone")
"""Every part of the wall time, goodput first; they add up to the wall time."""
CAUSE_TEXT: Final[dict[str, str]] = {
    PRODUCTIVE: "productive (kept steps)",
    "data_wait": "waiting for data",
    "allreduce_stall": "AllReduce stall",
    "checkpoint": "checkpoint save / restore",
    "hang_undetected": "hang until detected",
    "detect_to_restart": "detection to restart",
    "startup": "start-up and shutdown",
    "redone": "steps redone after a restart",
}


@dataclass(frozen=True, slots=True)
class Goodput:
    """A run's wall time by cause (seconds), its goodput ratio, and what the waste cost at a price."""

    wall_s: float
    seconds: dict[str, float] = field(default_factory=dict)  # cause -> seconds; sums to wall_s
    devices: int = 0

    @property
    def ratio(self) -> float:
        """Productive seconds / wall seconds (NaN for a run without wall time)."""
        return self.seconds.get(PRODUCTIVE, 0.0) / self.wall_s if self.wall_s > 0 else math.nan

    def share(self, cause: str) -> float:
        """The part of the wall time ``cause`` took (0..1)."""
        return self.seconds.get(cause, 0.0) / self.wall_s if self.wall_s > 0 else math.nan

    def cost(self, cause: str, price_per_device_hour: float) -> float:
        """What ``cause`` cost: devices x its seconds x the price."""
        return self.devices * self.seconds.get(cause, 0.0) / 3600.0 * price_per_device_hour

    def to_json(self, price_per_device_hour: float | None = None) -> dict[str, Any]:
        """What ``ringscope info`` prints: ratio, wall seconds, seconds and share (and cost) by cause."""
        out: dict[str, Any] = {"ratio": _round(self.ratio), "wall_s": _round(self.wall_s), "devices": self.devices,
                               "causes": {}}
        for cause in CAUSES:
            entry: dict[str, Any] = {"seconds": _round(self.seconds.get(cause, 0.0)),
                                     "share": _round(self.share(cause))}
            if price_per_device_hour:
                entry["cost"] = _round(self.cost(cause, price_per_device_hour))
            out["causes"][cause] = entry
        return out


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """What the cut of one attempt needs (Unix seconds; step seconds are averaged over ranks). Built from a recording
    (``facts_of``) or kept as steps arrive (``ringscope.gui.core.live.goodput_meter``): one definition, two sources."""

    attempt: int
    started_s: float
    ended_s: float
    first_step_start_s: float = math.nan
    last_step_end_s: float = math.nan
    reason: str = ""
    verdict_s: float = math.nan  # hang verdict
    redone_s: float = 0.0
    data_wait_s: float = 0.0  # inside kept steps
    stall_s: float = 0.0  # inside kept steps
    save_s: float = 0.0
    restore_s: float = 0.0


def goodput_of(run: SessionData, attempts: list[Attempt] | None = None) -> Goodput:
    """The goodput of one run (``SessionData.for_run``) from its steps, events and attempts."""
    return cut(facts_of(run, attempts), max(1, len(run.ranks)))


def cut(facts: list[AttemptFacts], devices: int) -> Goodput:
    """THE definition: the run's wall time (first attempt's start to last attempt's end) cut into ``CAUSES``."""
    seconds = dict.fromkeys(CAUSES, 0.0)
    timed = [a for a in facts if math.isfinite(a.started_s)]
    ends = [a.ended_s for a in timed if math.isfinite(a.ended_s)]
    if not timed or not ends:
        return Goodput(0.0, seconds, devices)
    for index, attempt in enumerate(timed):
        following = timed[index + 1].started_s if index + 1 < len(timed) else math.nan
        _attempt_parts(attempt, following, seconds)
    wall = max(0.0, max(ends) - timed[0].started_s)
    accounted = sum(seconds.values())
    if accounted > 0 and abs(accounted - wall) > 1e-9:  # rounding of clocks across hosts: scale onto the wall time
        seconds = {cause: value * wall / accounted for cause, value in seconds.items()}
    return Goodput(wall, seconds, devices)


def facts_of(run: SessionData, attempts: list[Attempt] | None = None) -> list[AttemptFacts]:
    """Each attempt's facts from a recording (``SessionData.for_run``)."""
    attempts = attempts_of(run) if attempts is None else attempts
    ranks = max(1, len(run.ranks))
    saves, restores = _checkpoint_seconds(run)
    step_attempt = step_attempts(run)
    out = []
    for attempt in attempts:
        redone, data, stall = _step_seconds(run, step_attempt, attempt.attempt, ranks)
        out.append(AttemptFacts(attempt.attempt, attempt.started_s, attempt.ended_s, attempt.first_step_start_s,
                                attempt.last_step_end_s, attempt.reason, attempt.verdict_s, redone, data, stall,
                                saves.get(attempt.attempt, 0.0), restores.get(attempt.attempt, 0.0)))
    return out


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _attempt_parts(attempt: AttemptFacts, next_start_s: float, seconds: dict[str, float]) -> None:
    """Add one attempt's wall time (its start to the next attempt's start, or its own end) to ``seconds``."""
    until = next_start_s if math.isfinite(next_start_s) else attempt.ended_s
    if not math.isfinite(attempt.first_step_start_s):  # no step at all: start-up (or a fault before the first step)
        cause = "startup" if not math.isfinite(next_start_s) else "detect_to_restart"
        seconds[cause] += max(0.0, until - attempt.started_s)
        return
    startup = max(0.0, attempt.first_step_start_s - attempt.started_s)
    restore = min(startup, attempt.restore_s)
    seconds["checkpoint"] += restore
    seconds["startup"] += startup - restore
    span = max(0.0, attempt.last_step_end_s - attempt.first_step_start_s)
    redone = min(attempt.redone_s, span)
    save = min(attempt.save_s, span - redone)
    data, stall = attempt.data_wait_s, attempt.stall_s
    waiting = min(data + stall, max(0.0, span - redone - save))
    scale = waiting / (data + stall) if data + stall > 0 else 0.0
    seconds["redone"] += redone
    seconds["checkpoint"] += save
    seconds["data_wait"] += data * scale
    seconds["allreduce_stall"] += stall * scale
    seconds[PRODUCTIVE] += max(0.0, span - redone - save - waiting)
    tail = max(0.0, until - attempt.last_step_end_s)
    if attempt.reason in ("hang", "") and math.isfinite(attempt.verdict_s):
        # after the verdict: waiting for the restart (or, still hung, for somebody to act)
        undetected = min(tail, max(0.0, attempt.verdict_s - attempt.last_step_end_s))
        seconds["hang_undetected"] += undetected
        seconds["detect_to_restart"] += tail - undetected
    elif math.isfinite(next_start_s):
        seconds["detect_to_restart"] += tail
    else:
        seconds["startup"] += tail  # the last attempt's shutdown


def _step_seconds(run: SessionData, step_attempt: np.ndarray, attempt: int,
                  ranks: int) -> tuple[float, float, float]:
    """(redone, data wait of kept, AllReduce stall of kept) step seconds of one attempt, averaged over ranks.
    ``step_attempt``: every step row's attempt (``step_attempts``)."""
    steps = run.steps
    mine = step_attempt == attempt
    earlier = steps["step"][step_attempt < attempt]
    redone = np.isin(steps["step"][mine], earlier[~np.isnan(earlier)])
    kept = ~redone
    step_s = np.nan_to_num(steps["step_s"][mine])
    data = np.nan_to_num(steps["data_wait_s"][mine])
    stall = np.nan_to_num(steps["comm_exposed_s"][mine])
    return float(step_s[redone].sum()) / ranks, float(data[kept].sum()) / ranks, float(stall[kept].sum()) / ranks


def _checkpoint_seconds(run: SessionData) -> tuple[dict[int, float], dict[int, float]]:
    """attempt -> seconds of checkpoint saves, and of restores (the slowest rank's per checkpoint)."""
    attempt_of_agent = attempts_of_agents(run)
    per: dict[tuple[str, int, int], float] = {}
    for event, agent in zip(run.events, run.event_agents, strict=False):
        if event.event in (EventKind.CHECKPOINT_SAVED, EventKind.CHECKPOINT_RESTORED) and event.duration_s:
            which = event.step if event.step is not None else round(event.ts_s)  # one checkpoint, several ranks
            key = (event.event, attempt_of_agent.get(agent, 1), which)
            per[key] = max(per.get(key, 0.0), float(event.duration_s))
    saves: dict[int, float] = {}
    restores: dict[int, float] = {}
    for (kind, number, _), duration in per.items():
        target = saves if kind == EventKind.CHECKPOINT_SAVED else restores
        target[number] = target.get(number, 0.0) + duration
    return saves, restores


def _round(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def run_accounting(data: SessionData, run_id: str) -> dict[str, Any]:
    """``ringscope info``'s per-run ``attempts`` and ``goodput`` (one pass over the run's data)."""
    run = data.for_run(run_id)
    attempts = attempts_of(run)
    return {"attempts": [a.to_json() for a in attempts], "goodput": goodput_of(run, attempts).to_json()}
