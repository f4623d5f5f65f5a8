"""The live runs of a window session: one ``LiveStore`` per run, the runs table, and each run's lifecycle.

What it owns: the routing of every agent's records to the store of the run its Hello names (so a DDP demo and a
MirroredStrategy run launched after it never mix), each run's lifecycle state (``ringscope.gui.core.analysis.runs``'s
one rule, fed with the agents' goodbyes, their silence and the launcher's word), and the runs table: what a row reads
of a run is copied under the lock, the row is built from the copy (``ringscope.gui.core.live.run_rows``).

What it must never do: import Qt, raise out of a sink method (they run on the collector thread), or grow without
bound: at most ``max_runs`` stores are kept (the oldest ended run's store is released first; its row stays, and
its data stays in the recording), and records of an agent whose Hello has not arrived yet wait in a bounded queue.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from ringscope.agent.control import AttemptNote
from ringscope.agent.schema import Event, EventKind, Heartbeat, Hello, Step
from ringscope.agent.wire import Batch
from ringscope.gui.core.analysis.hang import MIN_THRESHOLD_S, HangVerdict, RankPosition, judge_hang
from ringscope.gui.core.analysis.runs import (
    ENDED_STATES,
    FINISHED,
    HUNG,
    LOST,
    RUNNING,
    LaunchOutcome,
    RunInfo,
    decide_state,
)
from ringscope.gui.core.ingest.clocks import ClockAligner
from ringscope.gui.core.ingest.sink import Gap, Rejection
from ringscope.gui.core.live.goodput_meter import GoodputMeter
from ringscope.gui.core.live.run_rows import RowFacts, RunRow, build_row
from ringscope.gui.core.live.store import LiveStore

log = logging.getLogger(__name__)

MAX_RUNS: Final[int] = 32
"""Runs whose live stores are kept in memory; older ended runs are released (their rows and recordings stay)."""
PENDING_PER_AGENT: Final[int] = 64
"""Messages kept for an agent whose Hello has not arrived yet (agents re-send it every 5 s)."""
PENDING_AGENTS: Final[int] = 4096
PENDING_BYTES: Final[int] = 32 << 20
"""Memory (decoded messages) held for agents without a Hello, all together; beyond it they are not held (the
recording still has them)."""
MAX_EARLY_SCHEDULER: Final[int] = 256
"""Queued Slurm jobs whose latest scheduler state is kept before any of their agents said hello (oldest dropped)."""


@dataclass(slots=True)
class _Run:
    """Book-keeping of one run (guarded by ``LiveRuns._lock``)."""

    run_id: str
    store: LiveStore | None
    first_hello: Hello
    agents: dict[str, Hello] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    launch: LaunchOutcome | None = None
    stop_requested: bool = False
    state: str = RUNNING
    recorded: bool = False  # reopened from a file: its state is the recorded one, never re-decided
    ended_s: float = math.nan
    frozen: RunRow | None = None  # the last row, kept when the store is released
    positions: dict[int, RankPosition] = field(default_factory=dict)  # latest heartbeat per rank
    rank_agent: dict[int, str] = field(default_factory=dict)  # which agent reports each rank
    last_step_recv_s: float = math.nan  # when the latest step of any rank arrived
    hang: HangVerdict | None = None
    # Kept as agents join (``join``), so a runs-table row costs O(1) at 8 192 agents, not a pass over them:
    started_s: float = math.inf
    last_message_s: float = -math.inf
    world_size: int = 0
    hosts: set[str] = field(default_factory=set)
    decided_attempt: int = 0  # the attempt ``state`` was last decided for
    attempt: int = 1  # the latest attempt (start) of the run an agent said it belongs to (``Hello.attempt``)
    attempt_notes: list[AttemptNote] = field(default_factory=list)  # what a restart supervisor said
    scheduler: AttemptNote | None = None  # the batch scheduler's latest word on its job (a ``scheduler`` note)
    job_ids: dict[str, None] = field(default_factory=dict)  # Slurm jobs its agents ran in, in the order they joined
    meter: GoodputMeter = field(default_factory=GoodputMeter)

    def join(self, agent_id: str, hello: Hello) -> None:
        """An agent's Hello (first or repeated). An agent of a newer attempt starts that attempt: the earlier
        attempts' agents no longer decide the run's state, and the no-step clock of hang detection restarts."""
        attempt = hello.attempt or 1
        if attempt > self.attempt:
            self.attempt = attempt
            self.last_step_recv_s = math.nan
            self.positions.clear()
            self.rank_agent.clear()
            self.hang = None
        self.meter.joined(attempt, hello.started_s)
        self.agents[agent_id] = hello
        self.started_s = min(self.started_s, hello.started_s)
        self.world_size = max(self.world_size, hello.world_size)
        self.hosts.add(hello.host)
        if hello.job_id:
            self.job_ids[hello.job_id] = None


class LiveRuns:
    """An ``IngestSink`` that keeps one ``LiveStore`` per run. Thread-safe.

    Args:
        lost_timeout_s: an agent silent this long without a goodbye is gone (its run becomes ``lost``).
        store_factory: makes the store of a new run (tests and benchmarks pass their own sizes).
        max_runs: stores kept in memory.
    """

    def __init__(self, *, lost_timeout_s: float = 5.0, store_factory: Callable[[str], LiveStore] | None = None,
                 max_runs: int = MAX_RUNS) -> None:
        self._lost_timeout_s = float(lost_timeout_s)
        self._factory = store_factory or (lambda run_id: LiveStore(lost_timeout_s=self._lost_timeout_s,
                                                                    run_id=run_id))
        self._max_runs = max_runs
        self._clocks = ClockAligner()  # collector thread only
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}  # insertion order = order of appearance
        self._run_of_agent: dict[str, str] = {}
        self._pending: dict[str, deque[tuple[Batch, float]]] = {}
        self._pending_bytes = 0
        self._early_launches: dict[str, LaunchOutcome] = {}
        self._early_scheduler: dict[str, AttemptNote] = {}  # queued jobs' latest state, until an agent says hello
        self._version = 0
        self.hang_minimum_s = MIN_THRESHOLD_S  # a run is hung after max(this, 20 x median step) without a step

    # ---- IngestSink (collector thread) ---------------------------------------------------------------------------

    def on_batch(self, batch: Batch, recv_s: float) -> None:
        """Route one message to its run's store; hold it briefly when its agent's Hello has not arrived yet.
        A message from a host whose clock is off is moved onto the collector's clock first (``ClockAligner``)."""
        try:
            records = batch.records
            at = next((i for i in range(len(records) - 1, -1, -1) if isinstance(records[i], Hello)), None)
            if at is not None:
                self._clocks.note_hello(batch.agent_id, records[at])
            batch = self._clocks.align(batch, recv_s)  # record by record: the Hello stays at its index
            hello = batch.records[at] if at is not None else None
            assert hello is None or isinstance(hello, Hello)
            with self._lock:
                queued = None
                run: _Run | None
                if hello is not None:
                    run = self._register(batch.agent_id, hello)
                    queued = self._pending.pop(batch.agent_id, None)
                    self._pending_bytes -= sum(max(b.memory_bytes, b.size_bytes, 1) for b, _ in queued or ())
                else:
                    run_id = self._run_of_agent.get(batch.agent_id)
                    run = self._runs.get(run_id) if run_id is not None else None
                    if run is None:
                        self._hold(batch, recv_s)
                        return
                self._note(run, batch, recv_s)
                store = run.store
            if store is None:
                return  # a released run (beyond max_runs): its data is in the recording
            for held, held_recv in queued or ():
                store.on_batch(held, held_recv)
            store.on_batch(batch, recv_s)
        except Exception:  # a sink must never raise into the collector
            log.exception("live runs: could not take a message from %s", batch.agent_id)

    def on_gap(self, gap: Gap) -> None:
        """Count lost messages in the store of the agent's run."""
        store = self._store_of_agent(gap.agent_id)
        if store is not None:
            store.on_gap(gap)

    def on_rejection(self, rejection: Rejection) -> None:
        """Rejected messages belong to no run: every store counts them, so the status bar shows them whatever run
        is selected."""
        with self._lock:
            stores = [run.store for run in self._runs.values() if run.store is not None]
        for store in stores:
            store.on_rejection(rejection)

    # ---- Public API (GUI thread) ---------------------------------------------------------------------------------

    @property
    def lost_timeout_s(self) -> float:
        """Seconds of silence after which an agent without a goodbye is lost."""
        return self._lost_timeout_s

    @lost_timeout_s.setter
    def lost_timeout_s(self, value: float) -> None:
        self._lost_timeout_s = float(value)
        with self._lock:
            for run in self._runs.values():
                if run.store is not None:
                    run.store.lost_timeout_s = float(value)

    @property
    def version(self) -> int:
        """Grows whenever a run appears or changes state."""
        return self._version

    def run_ids(self) -> list[str]:
        """Every run seen, oldest first."""
        with self._lock:
            return list(self._runs)

    def store(self, run_id: str) -> LiveStore | None:
        """The live store of a run (None when unknown or released)."""
        with self._lock:
            run = self._runs.get(run_id)
            return run.store if run is not None else None

    def latest_run_id(self) -> str | None:
        """The run that appeared last (a new launch becomes the selected run)."""
        with self._lock:
            return next(reversed(self._runs), None)

    def note_launch(self, run_id: str, outcome: LaunchOutcome) -> None:
        """The launcher's word on a run it started (stopped / failed / finished, with the exit code)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                run.launch = outcome
            else:  # it ended before any agent said hello: remember it for when (if) one does
                self._early_launches[run_id] = outcome
            self._version += 1

    def add_recorded(self, info: RunInfo, store: LiveStore, agents: list[Hello]) -> None:
        """Add a run reopened from a recording (``ringscope.gui.core.live.replay``): its store filled, its state as
        recorded."""
        if not agents:
            return
        with self._lock:
            run = _Run(info.run_id, store, agents[0], state=info.state, recorded=True, ended_s=info.end_s)
            for agent in agents:
                run.join(agent.agent_id, agent)
            run.launch = LaunchOutcome(info.state, info.exit_code, info.end_s, info.detail) \
                if info.exit_code is not None else None
            self._runs[info.run_id] = run
            self._version += 1
        if info.ended:
            store.end(info.state, info.end_s)

    def note_stop_requested(self, run_id: str | None) -> None:
        """The window asked a run (None: every run) to stop: its ranks going quiet now are stopping, not lost."""
        with self._lock:
            for run in self._runs.values():
                if run_id is None or run.run_id == run_id:
                    run.stop_requested = True

    def priced_until(self, run_id: str) -> float | None:
        """Until when a run costs money: its end once it ended, else its latest message (None: unknown run).

        Both only grow, so a cost priced up to this never goes down — not even when the run's end is decided.
        """
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            return run.ended_s if math.isfinite(run.ended_s) else self._last_message(run)

    def refresh(self, now_s: float | None = None) -> list[tuple[str, str, str]]:
        """Decide every run's state now; returns the (run id, old state, new state) transitions."""
        now = time.time() if now_s is None else now_s
        changes = []
        with self._lock:
            for run in self._runs.values():
                if run.recorded:
                    continue
                old = run.state
                new = self._decide(run, now)
                if new != old:
                    run.state = new
                    self._version += 1
                    changes.append((run.run_id, old, new))
                    if new == HUNG:
                        run.meter.hung(run.attempt, now)
                # A run is over when its state says so, except a lost run whose other ranks still send: it goes
                # on (its figures keep moving) until they too finish or fall silent.
                over = new in ENDED_STATES and not (new == LOST and self._others_alive(run, now))
                if over and not math.isfinite(run.ended_s):
                    run.ended_s = self._end_time(run, now)
                    if run.store is not None:
                        run.store.end(new, run.ended_s)
                elif over and new != old and run.store is not None:
                    # the meter never runs backwards: a later verdict (lost -> stopped) keeps the later end
                    run.ended_s = max(self._end_time(run, now), run.ended_s)
                    run.store.end(new, run.ended_s)
                elif not over and math.isfinite(run.ended_s):
                    run.ended_s = math.nan
                    if run.store is not None:
                        run.store.reopen()
            self._release_old(now)
        return changes

    def rows(self, now_s: float | None = None, *, refresh: bool = True) -> list[RunRow]:
        """The runs table, oldest first (states refreshed first, unless the caller just did)."""
        now = time.time() if now_s is None else now_s
        if refresh:
            self.refresh(now)
        with self._lock:  # the collector thread adds agents and messages: copy what a row reads, under the lock
            facts = [self._facts(run) for run in self._runs.values()]
        return [build_row(run, now) for run in facts]

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _register(self, agent_id: str, hello: Hello) -> _Run:
        run = self._runs.get(hello.run_id)
        if run is None:
            early = self._early_launches.pop(hello.run_id, None)
            # Memory is bounded in runs too: past ``max_runs`` stores (none ended to release), a new run is listed
            # but not held (its recording has it), so a flood of run ids cannot allocate a store each.
            self._release_old(time.time(), room=1)
            held = sum(1 for r in self._runs.values() if r.store is not None)
            store = self._factory(hello.run_id) if held < self._max_runs else None
            run = _Run(hello.run_id, store, hello, launch=early,
                       scheduler=self._early_scheduler.pop(hello.run_id, None))
            self._runs[hello.run_id] = run
            self._version += 1
        if agent_id not in run.agents and run.state in ENDED_STATES and run.launch is None:
            run.finished.discard(agent_id)  # an agent (re)joins an ended run: it goes on (torchrun restart)
        run.join(agent_id, hello)
        self._run_of_agent[agent_id] = hello.run_id
        return run

    def _hold(self, batch: Batch, recv_s: float) -> None:
        size = max(batch.memory_bytes, batch.size_bytes, 1)
        if self._pending_bytes + size > PENDING_BYTES:
            return  # bounded in bytes: the recording still has it
        queue = self._pending.get(batch.agent_id)
        if queue is None:
            if len(self._pending) >= PENDING_AGENTS:
                return  # bounded in agents too
            queue = self._pending[batch.agent_id] = deque()
        if len(queue) >= PENDING_PER_AGENT:
            old, _ = queue.popleft()
            self._pending_bytes -= max(old.memory_bytes, old.size_bytes, 1)
        queue.append((batch, recv_s))
        self._pending_bytes += size

    def _note(self, run: _Run, batch: Batch, recv_s: float) -> None:
        run.last_seen[batch.agent_id] = recv_s
        run.last_message_s = max(run.last_message_s, recv_s)
        hello = run.agents.get(batch.agent_id)
        attempt = (hello.attempt or 1) if hello is not None else run.attempt
        for record in batch.records:
            if isinstance(record, Step):
                run.last_step_recv_s = recv_s
                run.meter.step(attempt, record)
            elif isinstance(record, Heartbeat):
                run.positions[record.rank] = RankPosition(record.rank, record.phase, record.since_s, record.step,
                                                          record.bucket, recv_s, record.stack or _kept_stack(
                                                              run.positions.get(record.rank), record))
                run.rank_agent[record.rank] = batch.agent_id
            elif isinstance(record, Event):
                if record.event == EventKind.FINISHED:
                    run.finished.add(batch.agent_id)
                else:
                    run.meter.event(attempt, record)

    def _store_of_agent(self, agent_id: str) -> LiveStore | None:
        with self._lock:
            run_id = self._run_of_agent.get(agent_id)
            run = self._runs.get(run_id) if run_id is not None else None
            return run.store if run is not None else None

    def _decide(self, run: _Run, now: float) -> str:
        agents = _current_agents(run)
        silent = len(self._silent(run, agents, now))
        run.decided_attempt = run.attempt
        if run.stop_requested and run.launch is None:
            silent = 0  # stopping: ranks go quiet before the launcher has seen every process exit
        run.hang = self._judge_hang(run, now) if not silent and len(run.finished) < len(agents) else None
        return decide_state(agents=len(agents), finished=len(run.finished & set(agents)), silent=silent,
                            launch=run.launch, hung=run.hang is not None)

    def _judge_hang(self, run: _Run, now: float) -> HangVerdict | None:
        if run.store is None or not math.isfinite(run.last_step_recv_s):
            return None
        snap = run.store.recent_snapshot(now)
        finished = {rank for rank, agent in run.rank_agent.items() if agent in run.finished}
        alive = {rank for rank, agent in run.rank_agent.items()
                 if agent not in run.finished and now - run.last_seen.get(agent, -math.inf) <= self._lost_timeout_s}
        alive |= {int(r) for r in snap.ranks.tolist() if int(r) not in run.rank_agent}  # agents without heartbeats
        return judge_hang(now_s=now, last_step_end_s=run.last_step_recv_s, median_step_s=snap.step_pct_s[0],
                          alive_ranks=alive, positions=run.positions, devices=max(len(snap.gpus), len(snap.ranks)),
                          minimum_s=self.hang_minimum_s, finished_ranks=finished)

    def hang(self, run_id: str) -> HangVerdict | None:
        """The hang verdict of a run while it is hung (None otherwise)."""
        with self._lock:
            run = self._runs.get(run_id)
            return run.hang if run is not None and run.state == HUNG else None

    def on_attempt(self, run_id: str, note: AttemptNote) -> None:
        """A restart supervisor's word on an attempt of a run (collector thread; ``IngestSink`` hook)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and note.event == "scheduler":
                run.scheduler = note
                self._version += 1
            elif run is not None:
                run.attempt_notes.append(note)
                run.meter.note(note)
                self._version += 1
            elif note.event == "scheduler":  # a queued job: no agent yet; kept for when one says hello
                self._early_scheduler.pop(run_id, None)
                self._early_scheduler[run_id] = note
                while len(self._early_scheduler) > MAX_EARLY_SCHEDULER:
                    self._early_scheduler.pop(next(iter(self._early_scheduler)))

    def run_status(self, run_id: str) -> dict[str, object] | None:
        """How the run stands now, for a restart supervisor (``status`` requests; any thread): its state, the attempt
        that state is about, its live agents, the hang verdict in words, the ranks that fell silent. None when no
        agent of the run said hello."""
        now = time.time()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            agents = _current_agents(run)
            # the watcher's last verdict, unless it was about an earlier attempt: a new attempt is running until
            # the next refresh decides otherwise (it must never inherit the verdict on the one it replaced)
            state = run.state if run.recorded or run.decided_attempt == run.attempt else RUNNING
            hang = run.hang.summary(now) if run.hang is not None and state == HUNG else None
            lost = sorted({r for a in self._silent(run, agents, now) for r in run.agents[a].ranks}) \
                if state == LOST else []
            return {"state": state, "attempt": run.attempt, "agents": len(agents),
                    "finished": len(run.finished & set(agents)), "lost_ranks": lost, "hang": hang,
                    "stepped": math.isfinite(run.last_step_recv_s)}

    def _silent(self, run: _Run, agents: list[str], now: float) -> list[str]:
        """Of ``agents``, those without a goodbye that sent nothing for longer than the lost timeout."""
        return [a for a in agents if a not in run.finished
                and now - run.last_seen.get(a, run.agents[a].started_s) > self._lost_timeout_s]

    def agent_of_rank(self, run_id: str, rank: int) -> str | None:
        """The agent id that reports ``rank`` in a run (for events about that rank), or None."""
        with self._lock:
            run = self._runs.get(run_id)
            return run.rank_agent.get(rank) if run is not None else None

    def _others_alive(self, run: _Run, now: float) -> bool:
        """Whether some agent of the run still sends (not finished, heard within the lost timeout)."""
        return any(agent not in run.finished and now - run.last_seen.get(agent, -math.inf) <= self._lost_timeout_s
                   for agent in _current_agents(run))

    def _end_time(self, run: _Run, now: float) -> float:
        """When an ended run stopped costing: its last message, or the launcher's exit time, whichever is later.

        A lost run is priced until it was found lost (``now``): its GPUs were held until then, and the cost so
        far must never go down when the verdict arrives.
        """
        last = self._last_message(run)
        if run.state == LOST:
            return max(now, last)
        return max(last, run.launch.ts_s if run.launch is not None else -math.inf)

    @staticmethod
    def _last_message(run: _Run) -> float:
        return run.last_message_s if math.isfinite(run.last_message_s) else run.first_hello.started_s

    def _release_old(self, now: float, room: int = 0) -> None:
        """Release the stores of the oldest ended runs beyond ``max_runs`` (less ``room`` for runs about to come)."""
        kept = [run for run in self._runs.values() if run.store is not None]
        for run in kept[: max(0, len(kept) - self._max_runs + room)]:
            if run.state in ENDED_STATES or (run.agents and run.finished >= set(run.agents)):
                if run.state not in ENDED_STATES:  # every rank said goodbye since the last refresh: say so now
                    run.state = FINISHED
                    run.ended_s = self._end_time(run, now)
                run.frozen = replace(build_row(self._facts(run), now), in_memory=False)
                run.store = None
                log.info("run %s released from memory (more than %d runs); its recording keeps it",
                         run.run_id, self._max_runs)

    def _facts(self, run: _Run) -> RowFacts:
        """What ``build_row`` reads of a run's book-keeping, copied (call with the lock held)."""
        return RowFacts(run.run_id, run.first_hello, run.started_s, run.world_size, len(run.hosts),
                         self._last_message(run), run.state, run.ended_s, run.launch, run.recorded, run.store,
                         run.frozen, run.attempt,
                         tuple(n.reason for n in run.attempt_notes if n.event == "ended" and n.attempt < run.attempt),
                         run.meter.goodput(max(run.world_size, len(run.rank_agent), 1),
                                           run.ended_s if math.isfinite(run.ended_s) else self._last_message(run)),
                         tuple(run.job_ids), *_scheduler(run))


def _scheduler(run: _Run) -> tuple[str, str]:
    """The batch scheduler's latest sentence and state word on the run's current attempt (``job 41 timeout``,
    ``timeout``); empty when it said nothing of this attempt."""
    note = run.scheduler
    return (note.detail, note.reason) if note is not None and note.attempt >= run.attempt else ("", "")


def _current_agents(run: _Run) -> list[str]:
    """The agents of the run's latest attempt (all of them when no agent names an attempt)."""
    return [agent for agent, hello in run.agents.items() if (hello.attempt or 1) == run.attempt]


def _kept_stack(previous: RankPosition | None, beat: Heartbeat) -> str | None:
    """A stack is sent once per stuck episode: keep it while the rank stays in that same phase."""
    if previous is not None and previous.since_s == beat.since_s and previous.phase == beat.phase:
        return previous.stack
    return None
