"""Runs: the trainings a session holds, each with its own identity, lifecycle state and summary.

A session (one window, one ``ringscope record``) can hold several trainings: the demo, then a MirroredStrategy run
launched from the same window, then a relaunch with other options. Each training announces a ``run_id`` in its
agents' Hello; everything an agent sends belongs to the run it names (``SessionData.for_run``).

This module owns the run lifecycle (``RUN_STATES`` and ``decide_state``, the one rule the live window and the
recorded-session readers share) and ``RunInfo``, the row of a runs table. It must never import Qt, and never guess
a state it cannot know: without a launcher, a run whose ranks all went silent at once is ``lost``, not ``stopped``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np

from ringscope.agent.schema import EventKind
from ringscope.gui.core.session_data import SessionData

RUNNING: Final = "running"
FINISHED: Final = "finished"  # every rank said goodbye
STOPPED: Final = "stopped"  # stopped from the window (SIGTERM/SIGINT from the launcher)
FAILED: Final = "failed"  # a launched process exited non-zero on its own
LOST: Final = "lost"  # a rank vanished without goodbye
HUNG: Final = "hung"  # ranks alive but no step completes (hang detection)
UNFINISHED: Final = "unfinished"  # the recording ended while the run was still going

RUN_STATES: Final[tuple[str, ...]] = (RUNNING, FINISHED, STOPPED, FAILED, LOST, HUNG, UNFINISHED)
ENDED_STATES: Final[frozenset[str]] = frozenset({FINISHED, STOPPED, FAILED, LOST, UNFINISHED})

STATE_TEXT: Final[dict[str, str]] = {
    RUNNING: "running",
    FINISHED: "finished: every rank said goodbye",
    STOPPED: "stopped from the window",
    FAILED: "failed: a process exited with an error",
    LOST: "lost: a rank vanished without saying goodbye",
    HUNG: "hung: no rank completes a step",
    UNFINISHED: "unfinished: the recording ended while the run was going",
}

LOST_TIMEOUT_S: Final[float] = 2.0
"""A rank (agent) with no message for this long, without a goodbye, is gone. Agents send a heartbeat every second,
so 2 s of silence (two missed beats) is a dead process (a SIGKILLed rank is lost within 3 s), not a busy one."""


@dataclass(frozen=True, slots=True)
class LaunchOutcome:
    """What the launcher knows of a run it started: how it ended, with which exit code, when (Unix seconds)."""

    state: str  # STOPPED | FAILED | FINISHED
    exit_code: int | None
    ts_s: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of the runs table (``ringscope info``'s ``runs``)."""

    run_id: str
    framework: str
    strategy: str
    world_size: int
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    state: str
    start_s: float
    end_s: float  # NaN while running
    last_seen_s: float
    steps: int  # steps recorded, all ranks
    samples: int | None  # samples recorded, all ranks (None when the agents do not report samples)
    exit_code: int | None
    detail: str = ""
    job_ids: tuple[str, ...] = ()  # the Slurm jobs its agents ran in (Hello.job_id), in the order they joined

    @property
    def ended(self) -> bool:
        """True once the run left ``running`` (and ``hung``)."""
        return self.state in ENDED_STATES

    def duration_s(self, now_s: float) -> float:
        """Wall time from the first agent's start to the end (or to ``now_s`` while it runs)."""
        end = self.end_s if math.isfinite(self.end_s) else now_s
        return max(0.0, end - self.start_s)

    def to_json(self) -> dict[str, object]:
        """The fields ``ringscope info`` prints (finite numbers or null: always standard JSON)."""
        return {
            "run_id": self.run_id, "framework": self.framework, "strategy": self.strategy,
            "world_size": self.world_size, "ranks": list(self.ranks), "hosts": list(self.hosts),
            "state": self.state, "start_s": _finite(self.start_s), "end_s": _finite(self.end_s),
            "steps": self.steps, "samples": self.samples, "exit_code": self.exit_code, "job_ids": list(self.job_ids),
        }


# ---- Public API ---------------------------------------------------------------------------------------------------


def decide_state(*, agents: int, finished: int, silent: int, launch: LaunchOutcome | None = None,
                 recording_closed: bool = False, hung: bool = False) -> str:
    """The one lifecycle rule, for live runs and recorded ones.

    Args:
        agents: agents (processes) of the run seen so far.
        finished: how many of them said goodbye (a ``finished`` event).
        silent: how many of the others sent nothing for longer than the lost timeout (or, for a recording that
            ended, whose last message came well before its end).
        launch: the launcher's word on the run, when the window started it.
        recording_closed: the session file was closed (the recorder stopped) — a run still going then is
            ``unfinished``, not lost.
        hung: the hang detector's verdict while ranks are alive.
    """
    if launch is not None and launch.state in (STOPPED, FAILED):
        return launch.state
    if agents and finished >= agents:
        return FINISHED
    if silent > 0:
        return LOST
    if launch is not None and launch.state == FINISHED:
        # the processes exited 0 but not every agent said goodbye (a script without close()): the launcher knows
        return FINISHED
    if recording_closed:
        return UNFINISHED
    return HUNG if hung else RUNNING


def runs_of(data: SessionData, *, launches: Mapping[str, LaunchOutcome] | None = None,
            recording_closed: bool | None = None, now_s: float | None = None,
            lost_timeout_s: float = LOST_TIMEOUT_S) -> list[RunInfo]:
    """The runs of a recorded (or live-loaded) session, oldest first.

    ``launches`` defaults to what the session file recorded from the window's launcher; ``recording_closed``
    defaults to whether the file was closed by its recorder. ``now_s`` (default: the end of the recording, or the
    clock for a file still being written) decides which silent agents are lost.
    """
    if launches is None:
        launches = {run_id: LaunchOutcome(str(row["state"]), row.get("exit_code"), float(row["ts_s"]),
                                          str(row.get("detail") or ""))
                    for run_id, row in data.counters.get("launches", {}).items()}
    meta = data.counters.get("meta", {})
    closed = ("closed_s" in meta) if recording_closed is None else recording_closed
    last_by_agent = _last_seen_by_agent(data)
    if now_s is None:
        now_s = _float(meta.get("closed_s")) if closed else _float(meta.get("updated_s"))
        if not math.isfinite(now_s):
            now_s = max(last_by_agent.values(), default=math.nan)
    finished_agents = {agent for event, agent in zip(data.events, data.event_agents, strict=False)
                       if event.event == EventKind.FINISHED}
    out = []
    for run_id in data.run_ids:
        run = data.for_run(run_id)
        latest = max((h.attempt or 1 for h in run.agents), default=1)
        ids = sorted({h.agent_id for h in run.agents if (h.attempt or 1) == latest})  # earlier attempts ended
        last_seen = [last_by_agent.get(agent, -math.inf) for agent in ids]
        finished = sum(1 for agent in ids if agent in finished_agents)
        silent = sum(1 for agent, seen in zip(ids, last_seen, strict=True)
                     if agent not in finished_agents and now_s - seen > lost_timeout_s)
        launch = launches.get(run_id)
        # a recording that ended while everybody was still sending: unfinished, not lost
        if closed and silent and silent + finished == len(ids) and not finished and now_s - max(last_seen) \
                <= lost_timeout_s * 2:
            silent = 0
        state = decide_state(agents=len(ids), finished=finished, silent=silent, launch=launch,
                             recording_closed=closed)
        out.append(summarize_run(run_id, run, state, launch, last_seen_s=max(last_seen, default=math.nan)))
    return out


def summarize_run(run_id: str, run: SessionData, state: str, launch: LaunchOutcome | None = None, *,
                  last_seen_s: float = math.nan) -> RunInfo:
    """A ``RunInfo`` from one run's data (``SessionData.for_run``) and its decided state."""
    steps = run.steps
    starts = [h.started_s for h in run.agents]
    step_start = float(np.nanmin(steps["start_s"])) if len(steps["start_s"]) else math.nan
    start_s = min([*starts, step_start], default=math.nan) if starts or math.isfinite(step_start) else math.nan
    step_end = float(np.nanmax(steps["end_s"])) if len(steps["end_s"]) else math.nan
    if state in ENDED_STATES:
        candidates = [v for v in (step_end, last_seen_s, launch.ts_s if launch else math.nan) if math.isfinite(v)]
        end_s = max(candidates) if candidates else math.nan
    else:
        end_s = math.nan
    samples_col = steps["samples"]
    samples = None if not len(samples_col) or np.isnan(samples_col).all() else int(np.nansum(samples_col))
    first = run.agents[0] if run.agents else None
    return RunInfo(
        run_id=run_id, framework=first.framework if first else "unknown",
        strategy=first.strategy if first else "unknown", world_size=run.world_size, ranks=tuple(run.ranks),
        hosts=tuple(sorted({h.host for h in run.agents})), state=state, start_s=start_s, end_s=end_s,
        last_seen_s=last_seen_s, steps=len(steps["step"]), samples=samples,
        exit_code=launch.exit_code if launch else None, detail=launch.detail if launch else "",
        job_ids=tuple(dict.fromkeys(h.job_id for h in run.agents if h.job_id)))


def pick_run(runs: Iterable[RunInfo], wanted: str | None) -> RunInfo:
    """The run a command should act on: ``wanted`` (an id, or an unambiguous prefix), else the only run.

    Raises ``LookupError`` with a message listing the runs when there is no such run or several and none was named.
    """
    runs = list(runs)
    listing = "; ".join(f"{r.run_id} ({r.framework}/{r.strategy}, {r.state})" for r in runs) or "none"
    if wanted is None:
        if len(runs) == 1:
            return runs[0]
        if not runs:
            raise LookupError("the session holds no run (no agent said hello)")
        raise LookupError(f"the session holds {len(runs)} runs; choose one with --run RUN (or --all-runs): {listing}")
    exact = [r for r in runs if r.run_id == wanted]
    matches = exact or [r for r in runs if r.run_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise LookupError(f"no run {wanted!r} in this session; its runs: {listing}")
    raise LookupError(f"--run {wanted!r} matches {len(matches)} runs; give more of the id: {listing}")


def launch_outcome(states: Iterable[tuple[str, int | None, bool]], ts_s: float) -> LaunchOutcome:
    """How a launched run ended, from its processes' (final state, exit code, stop requested) triples."""
    items = list(states)
    if any(stop for _, _, stop in items):
        codes = [code for _, code, _ in items if code is not None]
        return LaunchOutcome(STOPPED, codes[0] if codes else None, ts_s, "stopped from the window")
    bad = [(state, code) for state, code, _ in items if state != "exited"]
    if bad:
        state, code = bad[0]
        return LaunchOutcome(FAILED, code, ts_s, f"a process {state} with exit code {code}")
    return LaunchOutcome(FINISHED, 0, ts_s)


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _last_seen_by_agent(data: SessionData) -> dict[str, float]:
    """When each agent was last heard of (receive time of its latest record, or its latest event)."""
    last: dict[str, float] = {}
    for columns in (data.steps, data.gpu, data.host, data.health):
        if "agent_id" not in columns or "recv_s" not in columns or not len(columns["recv_s"]):
            continue
        agents, index = np.unique(columns["agent_id"].astype(str), return_inverse=True)
        latest = np.full(len(agents), -np.inf)
        np.maximum.at(latest, index, np.nan_to_num(columns["recv_s"], nan=-np.inf))
        for agent, seen in zip(agents.tolist(), latest.tolist(), strict=True):
            last[agent] = max(last.get(agent, -math.inf), seen)
    for hello in data.agents:
        last.setdefault(hello.agent_id, hello.started_s)
    for event, agent in zip(data.events, data.event_agents, strict=False):
        last[agent] = max(last.get(agent, -math.inf), event.ts_s)
    return last


def _float(raw: object) -> float:
    try:
        return float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
