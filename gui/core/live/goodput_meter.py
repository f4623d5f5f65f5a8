"""``GoodputMeter``: a live run's goodput facts, kept as its steps and events arrive (O(1) per record).

The live stores keep recent steps only, so the window's goodput card and ``ringscope_run_goodput_ratio`` cannot be
computed from them; this meter keeps, per attempt, the few sums the definition needs (first and last step, redone
step seconds, waiting inside kept steps, checkpoint seconds, the hang verdict) and hands them to the one definition,
``ringscope.gui.core.analysis.goodput.cut``. Memory: one small record per attempt and per checkpoint.

Owned by ``LiveRuns`` and called under its lock (collector thread for records, the watcher's refresh for verdicts).
Never imports Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ringscope.agent.control import AttemptNote
from ringscope.agent.schema import Event, EventKind, Step
from ringscope.gui.core.analysis.goodput import AttemptFacts, Goodput, cut


@dataclass(slots=True)
class _Attempt:
    """Running sums of one attempt (step seconds summed over ranks; divided by the rank count when cut)."""

    started_s: float = math.inf  # earliest agent start, unless the supervisor said
    noted_start_s: float = math.nan
    ended_s: float = math.nan
    reason: str = ""
    first_step_s: float = math.inf
    last_step_s: float = -math.inf
    reached: int = 0  # highest step number + 1
    redone_s: float = 0.0
    data_s: float = 0.0
    stall_s: float = 0.0
    verdict_s: float = math.nan
    checkpoints: dict[tuple[str, int], float] = field(default_factory=dict)  # (kind, step or second) -> slowest


class GoodputMeter:
    """Goodput facts of one live run."""

    def __init__(self) -> None:
        self._attempts: dict[int, _Attempt] = {}
        self._reached_before: dict[int, int] = {}  # attempt -> steps done by the attempts before it

    def joined(self, attempt: int, started_s: float) -> None:
        """An agent of ``attempt`` said hello (it started at ``started_s``)."""
        entry = self._entry(attempt)
        entry.started_s = min(entry.started_s, started_s)

    def step(self, attempt: int, step: Step) -> None:
        """One step of one rank."""
        entry = self._entry(attempt)
        entry.first_step_s = min(entry.first_step_s, step.start_s)
        entry.last_step_s = max(entry.last_step_s, step.end_s)
        entry.reached = max(entry.reached, step.step + 1)
        if step.step < self._reached_before.get(attempt, 0):
            entry.redone_s += step.step_s
        else:
            entry.data_s += step.data_wait_s or 0.0
            entry.stall_s += step.comm_exposed_s or 0.0

    def event(self, attempt: int, event: Event) -> None:
        """A checkpoint saved or restored (the slowest rank's duration counts once per checkpoint)."""
        if event.event in (EventKind.CHECKPOINT_SAVED, EventKind.CHECKPOINT_RESTORED) and event.duration_s:
            key = (event.event, event.step if event.step is not None else round(event.ts_s))
            entry = self._entry(attempt)
            entry.checkpoints[key] = max(entry.checkpoints.get(key, 0.0), float(event.duration_s))

    def hung(self, attempt: int, verdict_s: float) -> None:
        """The run was judged hung at ``verdict_s`` (the first verdict of the attempt counts)."""
        entry = self._entry(attempt)
        if math.isnan(entry.verdict_s):
            entry.verdict_s = verdict_s

    def note(self, note: AttemptNote) -> None:
        """A restart supervisor's word on an attempt."""
        entry = self._entry(note.attempt)
        if note.event == "started":
            entry.noted_start_s = note.ts_s
        elif note.event == "ended":
            entry.ended_s, entry.reason = note.ts_s, note.reason

    def goodput(self, ranks: int, end_s: float) -> Goodput:
        """The run's goodput now (``end_s``: its end once it ended, else now)."""
        numbers = sorted(self._attempts)
        facts = []
        for index, number in enumerate(numbers):
            entry = self._attempts[number]
            last = index == len(numbers) - 1
            started = entry.noted_start_s if math.isfinite(entry.noted_start_s) else entry.started_s
            ended = entry.ended_s if math.isfinite(entry.ended_s) else (
                end_s if last else entry.last_step_s)
            stepped = math.isfinite(entry.first_step_s)
            saves = sum(v for (kind, _), v in entry.checkpoints.items() if kind == EventKind.CHECKPOINT_SAVED)
            restores = sum(v for (kind, _), v in entry.checkpoints.items() if kind == EventKind.CHECKPOINT_RESTORED)
            share = 1.0 / max(1, ranks)
            facts.append(AttemptFacts(
                number, started if math.isfinite(started) else math.nan, ended,
                entry.first_step_s if stepped else math.nan, entry.last_step_s if stepped else math.nan,
                entry.reason, entry.verdict_s, entry.redone_s * share, entry.data_s * share, entry.stall_s * share,
                saves, restores))
        return cut(facts, max(1, ranks))

    def _entry(self, attempt: int) -> _Attempt:
        entry = self._attempts.get(attempt)
        if entry is None:
            entry = self._attempts[attempt] = _Attempt()
            self._reached_before[attempt] = max((a.reached for n, a in self._attempts.items() if n < attempt),
                                                default=0)
        return entry
