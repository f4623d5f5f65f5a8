"""The rows of the window's runs table: ``RunRow``, the facts a row reads of a run (``RowFacts``, copied under
``LiveRuns``' lock) and the row built from them with the run's latest snapshot.

Why apart from ``ringscope.gui.core.live.runs``: a row is built outside the runs' lock while the collector thread
goes on adding agents and messages; everything here reads only the copy, never the live book-keeping.

What it must never do: import Qt, or read a run's live book-keeping (its agents, their messages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ringscope.agent.schema import Hello
from ringscope.gui.core.analysis.attempts import attempts_text
from ringscope.gui.core.analysis.goodput import Goodput
from ringscope.gui.core.analysis.runs import LaunchOutcome
from ringscope.gui.core.live.store import LiveStore


@dataclass(frozen=True, slots=True)
class RowFacts:
    """A copy of what a runs-table row reads of a run's book-keeping, taken under ``LiveRuns._lock``: the row itself
    is built outside it (``build_row``), while the collector thread goes on adding agents and messages to the run."""

    run_id: str
    first_hello: Hello
    started_s: float
    world_size: int
    hosts: int
    last_message_s: float
    state: str
    ended_s: float
    launch: LaunchOutcome | None
    recorded: bool
    store: LiveStore | None
    frozen: RunRow | None
    attempts: int = 1
    attempt_reasons: tuple[str, ...] = ()
    goodput: Goodput | None = None
    job_ids: tuple[str, ...] = ()
    scheduler: str = ""
    scheduler_word: str = ""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One row of the window's runs table. Money and rates are ``NaN`` when unknown."""

    run_id: str
    framework: str
    strategy: str
    world_size: int
    ranks: int
    hosts: int
    state: str
    started_s: float
    ended_s: float
    duration_s: float
    priced_s: float  # seconds of this run that cost money so far: up to its last message, or to its end
    steps: int
    samples_per_s: float
    steps_per_s: float
    idle_share: float
    devices: int
    device_unit: str  # "GPU" or "rank" (CPU-only runs are priced per rank)
    exit_code: int | None
    in_memory: bool
    attempts: int = 1  # starts of the run (restarts + 1)
    attempt_reasons: tuple[str, ...] = ()  # why each earlier attempt ended (hang, failure, lost): supervisor notes
    goodput: Goodput | None = None  # the run's wall time by cause so far (ringscope.gui.core.analysis.goodput)
    job_ids: tuple[str, ...] = ()  # the Slurm jobs it ran in (SLURM_JOB_ID in its agents' Hello), one per attempt
    scheduler: str = ""  # the batch scheduler's latest sentence on its current attempt (``job 41 timeout``), "" none
    scheduler_word: str = ""  # its state word (``timeout``; ``slurm.STATE_WORDS``), "" none

    @property
    def job_text(self) -> str:
        """``"job 123"`` / ``"jobs 123, 140"`` ("" for a run outside a batch scheduler)."""
        if not self.job_ids:
            return ""
        return ("job " if len(self.job_ids) == 1 else "jobs ") + ", ".join(self.job_ids)

    @property
    def attempts_text(self) -> str:
        """``"3 attempts · hang, lost"`` ("" for a run started once)."""
        return attempts_text(self.attempts, self.attempt_reasons)

    def cost(self, price_per_device_hour: float) -> float:
        """What the run cost so far at this price: devices x priced time. Priced up to the last message while the
        run goes and up to its end afterwards, so it never decreases."""
        return self.devices * self.priced_s / 3600.0 * price_per_device_hour


def build_row(run: RowFacts, now: float) -> RunRow:
    """A runs-table row; the store's snapshot is taken here, outside ``LiveRuns._lock``."""
    if run.store is None and run.frozen is not None:
        return run.frozen
    hello = run.first_hello
    snap = run.store.recent_snapshot(now) if run.store is not None else None
    started = run.started_s
    ended = run.ended_s
    if run.recorded and not math.isfinite(ended) and snap is not None:
        now = snap.latest_end_s if math.isfinite(snap.latest_end_s) else now  # a recording's "now" is its end
    duration = max(0.0, (ended if math.isfinite(ended) else now) - started)
    priced = max(0.0, (ended if math.isfinite(ended) else run.last_message_s) - started)
    ranks = len(snap.ranks) if snap is not None else 0
    gpus = len(snap.gpus) if snap is not None else 0
    return RunRow(
        run_id=run.run_id, framework=hello.framework, strategy=hello.strategy,
        world_size=max(run.world_size, ranks), ranks=ranks, hosts=run.hosts, state=run.state, started_s=started,
        ended_s=ended, duration_s=duration, priced_s=priced, steps=snap.steps_total if snap is not None else 0,
        samples_per_s=snap.samples_per_s if snap is not None else math.nan,
        steps_per_s=snap.steps_per_s if snap is not None else math.nan,
        idle_share=snap.idle_share if snap is not None else math.nan,
        devices=max(gpus, ranks), device_unit="GPU" if gpus else "rank",
        exit_code=run.launch.exit_code if run.launch is not None else None, in_memory=run.store is not None,
        attempts=run.attempts, attempt_reasons=run.attempt_reasons, goodput=run.goodput, job_ids=run.job_ids,
        scheduler=run.scheduler, scheduler_word=run.scheduler_word)
