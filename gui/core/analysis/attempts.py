"""The attempts of a run: each start of the same training under the same run id, as a recording holds them.

A run restarted by a supervisor (``ringscope run --restart``, the window's *Restart automatically*, or torchrun's
own ``--max-restarts``) has several attempts. The recording knows them from two sources, and this module joins them:

* the agents: each says in its Hello which attempt it belongs to (``Hello.attempt``), so every step row is
  attributed to an attempt; agents that say nothing belong to attempt 1;
* the supervisor's notes (the session's ``attempts`` table): when each attempt started and ended, why it ended
  (``hang``, ``failure``, ``lost``, ``finished``, ``stopped``) and its exit code.

From the steps it derives where each attempt resumed from (its lowest step number, i.e. the steps already done
when it started: the checkpoint it restored) and how many steps it **redid**: step numbers an earlier attempt had
already completed. Never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ringscope.agent.schema import EventKind
from ringscope.gui.core.session_data import SessionData


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a run. Times are Unix seconds (NaN when unknown)."""

    attempt: int
    started_s: float
    ended_s: float
    reason: str  # why it ended: hang, failure, lost, finished, stopped; "" when nobody said
    exit_code: int | None
    first_step_start_s: float  # when its first step began (NaN: it made none)
    last_step_end_s: float
    steps: int  # distinct step numbers it completed
    resumed_from: int | None  # steps already done when it started (None: it made no step)
    reached: int | None  # steps done when it ended (highest step number + 1)
    redone: int  # of its steps, how many an earlier attempt had already completed
    verdict_s: float = math.nan  # when its hang was detected (the collector's hang event), NaN when none
    stalled_since_s: float = math.nan  # since when it made no step, per that verdict
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """What ``ringscope info`` prints for an attempt (finite numbers or null)."""
        def num(value: float) -> float | None:
            return round(value, 3) if math.isfinite(value) else None

        return {"attempt": self.attempt, "start_s": num(self.started_s), "end_s": num(self.ended_s),
                "first_step_s": num(self.first_step_start_s), "reason": self.reason or None,
                "exit_code": self.exit_code, "resumed_from_step": self.resumed_from,
                "reached_step": self.reached, "steps": self.steps, "steps_redone": self.redone,
                "hang_detected_s": num(self.verdict_s), "detail": self.detail or None}


def attempts_of(run: SessionData) -> list[Attempt]:
    """The attempts of one run (``SessionData.for_run``), in order; one attempt for a run never restarted."""
    notes = _notes(run)
    attempt_of_agent = attempts_of_agents(run)
    numbers = sorted(set(attempt_of_agent.values()) | set(notes) | {1})
    steps = run.steps
    step_attempt = step_attempts(run)
    hangs = _hangs(run, attempt_of_agent)
    done: set[int] = set()
    out = []
    for number in numbers:
        mine = step_attempt == number
        step_numbers = steps["step"][mine]
        step_numbers = step_numbers[~np.isnan(step_numbers)].astype(np.int64) if len(step_numbers) else step_numbers
        distinct = set(step_numbers.tolist())
        starts, ends = steps["start_s"][mine], steps["end_s"][mine]
        first = float(np.nanmin(starts)) if len(starts) and not np.isnan(starts).all() else math.nan
        last = float(np.nanmax(ends)) if len(ends) and not np.isnan(ends).all() else math.nan
        note = notes.get(number, {})
        agents_started = [h.started_s for h in run.agents if (h.attempt or 1) == number]
        started = _first_finite(note.get("started_s"), min(agents_started, default=math.nan), first)
        ended = _first_finite(note.get("ended_s"), last, started)
        verdict, stalled = hangs.get(number, (math.nan, math.nan))
        out.append(Attempt(
            attempt=number, started_s=started, ended_s=ended, reason=str(note.get("reason") or ""),
            exit_code=note.get("exit_code"), first_step_start_s=first, last_step_end_s=last, steps=len(distinct),
            resumed_from=min(distinct) if distinct else None, reached=max(distinct) + 1 if distinct else None,
            redone=len(distinct & done), verdict_s=verdict, stalled_since_s=stalled,
            detail=str(note.get("detail") or "")))
        done |= distinct
    if len(out) > 1 and out[0].steps == 0 and not notes.get(1) and 1 not in attempt_of_agent.values():
        out = out[1:]  # numbering started above 1 (torchrun's restarts seen from the 2nd on): no phantom attempt 1
    return out


def attempts_of_agents(run: SessionData) -> dict[str, int]:
    """agent id -> the attempt it belongs to (1 when its Hello names none)."""
    return {h.agent_id: h.attempt or 1 for h in run.agents}


def step_attempts(run: SessionData) -> np.ndarray:
    """The attempt of every step row (int64, the step columns' order): one dictionary lookup per agent, not per row."""
    agents = run.steps.get("agent_id")
    if agents is None or not len(agents):
        return np.ones(len(run.steps["step"]), dtype=np.int64)
    names, index = np.unique(agents.astype(str), return_inverse=True)
    attempt_of_agent = attempts_of_agents(run)
    return np.array([attempt_of_agent.get(name, 1) for name in names.tolist()], dtype=np.int64)[index]


def attempts_text(count: int, reasons: Sequence[str]) -> str:
    """``"3 attempts · hang, failure"`` (``reasons``: why the earlier attempts ended); "" for a run started once."""
    if count <= 1:
        return ""
    faults = [reason for reason in reasons if reason]
    return f"{count} attempts" + (f" · {', '.join(faults)}" if faults else "")


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _notes(run: SessionData) -> dict[int, dict[str, Any]]:
    """attempt -> {started_s, ended_s, reason, exit_code, detail} from the supervisor's notes of this run."""
    rows = run.counters.get("attempts", {})
    run_id = run.counters.get("run_id")
    if run_id is not None:
        rows = {run_id: rows.get(run_id, [])}
    elif len(rows) > 1:
        ids = {h.run_id for h in run.agents}
        rows = {k: v for k, v in rows.items() if k in ids}
    out: dict[int, dict[str, Any]] = {}
    for notes in rows.values():
        for note in notes:
            entry = out.setdefault(int(note["attempt"]), {})
            if note["event"] == "started":
                entry["started_s"] = note["ts_s"]
            elif note["event"] == "ended":
                entry.update(ended_s=note["ts_s"], reason=note.get("reason"), exit_code=note.get("exit_code"),
                             detail=note.get("detail"))
    return out


def _hangs(run: SessionData, attempt_of_agent: dict[str, int]) -> dict[int, tuple[float, float]]:
    """attempt -> (verdict time, stalled since) of its first recorded hang."""
    out: dict[int, tuple[float, float]] = {}
    for event, agent in zip(run.events, run.event_agents, strict=False):
        if event.event != EventKind.HANG:
            continue
        number = attempt_of_agent.get(agent, 1)
        stalled = event.ts_s - (event.duration_s or 0.0)
        out.setdefault(number, (event.ts_s, stalled))
    return out


def _first_finite(*values: object) -> float:
    for value in values:
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value)
    return math.nan
