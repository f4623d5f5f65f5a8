"""The live store: what the window shows, kept in bounded numpy ring buffers fed by the collector thread.

What it owns: per-rank recent steps, per-rank time-bucketed phase sums (ranks x buckets, for heatmaps and stacked
columns), per-GPU and per-host series, the ranks-table state (running / lost / finished, last seen, drops, gaps),
ingest rates, and a cheap live straggler / idle-cause heuristic (the full analysis lives in
``ringscope.gui.core.analysis.summary``).

This module holds the store itself: ingest (the sink methods), the per-rank rings of recent steps and figures, the
agents' book-keeping, the counters and the frame copy. Its parts live beside it, each guarded by this store's lock:
the time-bucket ring with its merging (``ringscope.gui.core.live.time_buckets``), the recycled heat-map frame copies
(``ringscope.gui.core.live.heat_pool``), the bulk reload of a recording's steps and the export of the recent ones
(``ringscope.gui.core.live.step_columns``), and the GPU / host rings (``ringscope.gui.core.live.device_series``). The
``Snapshot`` type and the heuristics that build it from the store's copy live in ``ringscope.gui.core.live.snapshot``.
Per frame the store copies O(ranks x buckets) numpy arrays under its lock and rebuilds only the GPU / host series that
received a sample since the previous frame (copy-on-change), so a frame with 1024 ranks stays cheap. Steps (10 000 a
second at 1 024 ranks x 10 steps/s) are only handed over by the collector thread, as a list: the next reader (a
frame, the analysis; at the latest every ``PENDING_STEPS``) takes them into the rings in one vectorized pass, and a
new agent's Hello or a "finished" event takes them first, so no rank's state is seen out of order.

What it must never do: import Qt, block the collector for long, grow without bound, or raise out of a sink method
(``on_batch`` / ``on_gap`` / ``on_rejection`` run on the collector thread; a bad record is counted, not fatal).
The GUI never reads the buffers directly: it calls ``snapshot()`` on its timer and gets an immutable ``Snapshot``.
A missing reading stays NaN, never 0; an empty bucket stays NaN, so the views can draw gaps.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import Event, EventKind, GpuSample, Health, Hello, HostSample, Step
from ringscope.agent.wire import Batch
from ringscope.gui.core.ingest.sink import Gap, Rejection
from ringscope.gui.core.ingest.transit import TransitTracker
from ringscope.gui.core.live.device_series import SESSION_GPU_READINGS, SESSION_GPU_READINGS_MIN, DeviceSeries
from ringscope.gui.core.live.heat_pool import HeatPool
from ringscope.gui.core.live.snapshot import (
    PHASES,
    STATE_FINISHED,
    STATE_LOST,
    STATE_RUNNING,
    GpuSeries,
    HostState,
    LiveStraggler,
    Snapshot,
    build_snapshot,
    find_live_straggler,
    readonly,
)
from ringscope.gui.core.live.step_columns import (
    COLUMN,
    PHASE_TOTALS,
    add_phase_totals,
    columns_matrix,
    empty_recent,
    grown_recent,
    health_columns,
    into_ring,
    pending_matrix,
    recent_columns,
    take_recent,
)
from ringscope.gui.core.live.time_buckets import HEAT, TimeBuckets
from ringscope.gui.core.session_data import Columns, SessionData

__all__ = ["PHASES", "STATE_FINISHED", "STATE_LOST", "STATE_RUNNING", "GpuSeries", "HostState", "LiveStore",
           "LiveStraggler", "Snapshot", "find_live_straggler"]

log = logging.getLogger(__name__)

MAX_RANKS: Final[int] = 8192
"""Ranks one store shows; records of further ranks are counted (``records_beyond_rank_cap``), not kept: a message
naming 65 536 ranks must not cost the window gigabytes (each rank holds ~40 KB of history). The recording has
them all."""
SESSION_STEPS: Final[int] = 1 << 18
"""Step rows ``to_session_data`` hands the live analysis at most (~45 MB as columns). Past it each rank gives its
newest ``SESSION_STEPS // ranks`` steps (at least ``recent_window``): at 8 192 ranks 32 of the 128 it keeps, so an
analysis pass copies a quarter of the ring under the collector's lock and sends ~40 MB to the window, not ~170 MB.
Up to 2 048 ranks (at the default 128 steps) every kept step goes."""
PENDING_STEPS: Final[int] = 1024
"""Steps the collector hands over as a list at most before it takes them into the rings itself. A reader (a frame,
the analysis) takes what is pending first, so no reader ever sees a step missing. Measured on 2 cores, 1 024 ranks in
messages of 4 steps: handing a step over costs the collector 0.8 µs where taking it into the rings one by one cost
6; a frame's pass over the ~330 steps since the one before costs ~2.3 µs a step."""
STRAGGLER_EVERY_S: Final[float] = 0.25
"""How often frames re-judge the straggler (between, a frame shows the last verdict); per 1 024 ranks past 1 024."""


class LiveStore:
    """Bounded live state of a session. Implements ``ringscope.gui.core.ingest.sink.IngestSink``; thread-safe.

    Args:
        lost_timeout_s: a rank with no message for longer than this is shown as lost.
        bucket_s: width of one time bucket of the heat matrices at the start of a run, seconds.
        buckets: how many buckets are kept. When a run outgrows ``buckets * bucket_s`` seconds, the bucket width
            doubles and neighbouring buckets merge, so the matrices always cover the whole run (level of detail:
            a 1-hour run in 600 buckets has 8 s buckets; ``Snapshot.bucket_s`` says which).
        recent_steps: steps kept per rank for tables, per-rank breakdowns and ``to_session_data``.
        recent_window: steps averaged for the per-rank figures and the straggler heuristic.
        series_len: readings kept per GPU and per host.
    """

    def __init__(self, *, lost_timeout_s: float = 5.0, bucket_s: float = 1.0, buckets: int = 600,
                 recent_steps: int = 128, recent_window: int = 20, series_len: int = 600, run_id: str = "",
                 max_ranks: int = MAX_RANKS) -> None:
        if bucket_s <= 0 or buckets < 2 or recent_steps < 1 or not 1 <= recent_window <= recent_steps:
            raise ValueError(f"LiveStore: need bucket_s > 0 (got {bucket_s}), buckets >= 2 (got {buckets}), "
                             f"1 <= recent_window ({recent_window}) <= recent_steps ({recent_steps})")
        self.lost_timeout_s = float(lost_timeout_s)
        self.run_id = run_id
        self._max_ranks = max_ranks
        self._ended: tuple[str, float] | None = None  # (run state, when) once the run is over
        self._straggler_judged_s = -math.inf
        self._R = recent_steps
        self._K = recent_window
        self._lock = threading.Lock()
        self._version = 0
        self._cache: Snapshot | None = None
        # rank rows (arrival order) and their growable arrays
        self._row_of: dict[int, int] = {}
        self._cap = 0
        self._rows = 0
        self._rank_arr = np.zeros(0, np.int64)
        self._rank = {name: np.full(0, np.nan)
                      for name in ("last_seen_s", "current_step", "finished", "count", "samples")}
        self._recent = empty_recent(recent_steps)  # slot-major rings of recent steps (step_columns)
        self._rank_hosts: list[str] = []
        self._buckets = TimeBuckets(buckets, bucket_s)
        self._heat_pool = HeatPool(HEAT, buckets)
        self._grow(8)  # doubles as ranks appear: a store costs ~0.3 MB until it has ranks to show
        self._hosts_version = 0
        self._hosts_cache: tuple[tuple[int, int], tuple[str, ...]] | None = None
        self._loss_version = 0
        self._loss_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        # per agent / host / gpu
        self._agents: dict[str, Hello] = {}
        self._agent_ranks: dict[str, set[int]] = {}
        self._rank_agents: dict[int, set[str]] = {}
        self._agent_dropped: dict[str, int] = {}
        self._agent_missing: dict[str, int] = {}
        self._health: dict[str, Health] = {}
        # GPU and host series (copy-on-change per frame); guarded by self._lock like everything else here
        self._devices = DeviceSeries(series_len)
        self._events: deque[Event] = deque(maxlen=2000)
        # ingest counters and rates (per receive second)
        self._counters: dict[str, Any] = {"messages": 0, "records": 0, "gaps": 0, "missing_messages": 0,
                                          "rejected": {}, "late_steps": 0, "bad_records": 0,
                                          "records_beyond_rank_cap": 0}
        self._sec_abs = np.full(16, -1, np.int64)
        self._sec_msgs = np.zeros(16)
        self._steps_total = 0
        self._pending: list[tuple[str, Step]] = []  # (agent id, step) handed over, not yet in the rings (_settle)
        self._agent_rank_pairs: set[tuple[str, int]] = set()  # checked already: cache over _rank_agents (-1.1 ms/pass)
        self._latest_end_s = math.nan
        self._end_ring = np.full(1 << 16, np.nan)  # end_s of ingested steps, for latency measurements
        # every step's phase seconds summed, also those the rings no longer hold: what the run's waiting cost
        self._phase_totals = dict.fromkeys(PHASE_TOTALS, 0.0)
        self._transit = TransitTracker()  # how long each agent's messages queued: the live network analysis's evidence

    # ---- Public API: IngestSink (collector thread) ---------------------------------------------------------------

    def on_batch(self, batch: Batch, recv_s: float) -> None:
        """Take one validated message. Never raises: a record that cannot be stored is counted and skipped."""
        with self._lock:
            self._version += 1
            self._counters["messages"] += 1
            self._counters["records"] += len(batch.records)
            self._count_second(recv_s)
            self._transit.observe(batch.agent_id, batch.sent_s, recv_s)
            for record in batch.records:
                try:
                    self._take(batch.agent_id, record, recv_s)
                except _RankCapError:
                    self._counters["records_beyond_rank_cap"] += 1
                except Exception:  # a sink must never raise into the collector
                    self._counters["bad_records"] += 1
                    log.debug("store: could not take %r", record, exc_info=True)
            for rank in self._agent_ranks.get(batch.agent_id, ()):
                row = self._row_of.get(rank)
                if row is not None:
                    self._rank["last_seen_s"][row] = recv_s

    def on_gap(self, gap: Gap) -> None:
        """Count messages an agent lost; the ranks it reports for show them in their ``gaps`` column."""
        with self._lock:
            self._version += 1
            self._counters["gaps"] += 1
            self._counters["missing_messages"] += gap.missing
            self._agent_missing[gap.agent_id] = self._agent_missing.get(gap.agent_id, 0) + gap.missing
            self._loss_version += 1

    def on_rejection(self, rejection: Rejection) -> None:
        """Count a rejected message by reason."""
        with self._lock:
            self._version += 1
            rejected = self._counters["rejected"]
            rejected[rejection.reason] = rejected.get(rejection.reason, 0) + 1

    # ---- Public API: run lifecycle -------------------------------------------------------------------------------

    def end(self, state: str, ts_s: float) -> None:
        """The run is over (``state``: finished / stopped / failed / lost…): freeze its figures at ``ts_s``."""
        with self._lock:
            if self._ended is None or self._ended[0] != state:
                self._ended = (state, ts_s)
                self._version += 1

    def reopen(self) -> None:
        """The run is going again (a rank restarted under the same run id)."""
        with self._lock:
            if self._ended is not None:
                self._ended = None
                self._version += 1

    @property
    def ended(self) -> tuple[str, float] | None:
        """(state, when) once the run is over, else None."""
        return self._ended

    # ---- Public API: GUI thread ----------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Incremented on every change; a view can skip work when it has not moved."""
        return self._version

    @property
    def bucket_s(self) -> float:
        """The width of one time bucket now, seconds (it doubles as the run outgrows the ring)."""
        return self._buckets.bucket_s

    def snapshot(self, now_s: float | None = None) -> Snapshot:
        """An immutable view for one frame. Reuses the previous one when nothing changed in the last 0.2 s."""
        now = time.time() if now_s is None else now_s
        cached = self._cache
        if cached is not None and cached.version == self._version and 0 <= now - cached.now_s < 0.2:
            return cached
        with self._lock:
            self._settle()
            raw = self._copy_locked()
            raw["gpu_summary"] = self._devices.summary(self._ended[1] if self._ended else now)
            if now_s is None:
                now = time.time()  # after the copy: no message in it can be "newer than now"
        # The straggler verdict judges every rank's recent steps (~10 ms at 1024 ranks): a few times a second is
        # what a reader can follow, not every frame.
        # It costs in proportion to the ranks: past 1 024 it is judged less often (every 2 s at 8 192 ranks).
        every = STRAGGLER_EVERY_S * max(1.0, raw["ranks"].size / 1024)
        if (cached is not None and 0 <= now - self._straggler_judged_s < every
                and cached.ranks.size == raw["ranks"].size and not raw["ended"]):
            raw["straggler"] = cached.straggler
        else:
            self._straggler_judged_s = now
        snap = build_snapshot(raw, now, raw["bucket_s"], self.lost_timeout_s)
        self._cache = snap
        return snap

    def recent_snapshot(self, now_s: float | None = None, max_age_s: float = 1.0) -> Snapshot:
        """The last snapshot a frame built, if it is younger than ``max_age_s``, else a new one: for readers that
        want figures a few times a second (the runs table, hang checks, metrics) without building their own."""
        now = time.time() if now_s is None else now_s
        cached = self._cache
        # A run's first steps are not left out for up to max_age_s: the runs table would say "0 steps" while the
        # cards, drawn from the frame, count thousands (one snapshot more per run, once)
        if (cached is not None and 0 <= now - cached.now_s < max_age_s
                and (cached.steps_total > 0 or (self._steps_total == 0 and not self._pending))):
            return cached
        return self.snapshot(now_s)

    def step_end_times(self, since: int, until: int | None = None) -> tuple[np.ndarray, int]:
        """``end_s`` of the steps ingested after the first ``since`` up to the first ``until`` (default: all; at
        most the last 65 536), and where that ends (a frame's ``steps_total`` names the steps it showed)."""
        with self._lock:
            self._settle()
            total = self._steps_total if until is None else min(until, self._steps_total)
            size = self._end_ring.size
            first = max(since, total - size)
            idx = np.arange(first, total) % size
            return self._end_ring[idx].copy(), total

    def to_session_data(self, budget: int = SESSION_STEPS, gpu_budget: int = SESSION_GPU_READINGS,
                        least: int | None = None) -> SessionData:
        """What the store holds as a ``SessionData`` for live cost and analysis: each rank's recent steps, its newest
        ``budget // ranks`` when all of them would be more than ``budget`` rows; each GPU's readings likewise within
        ``gpu_budget`` (``DeviceSeries.gpu_columns``). ``least``: what each rank and GPU gives at least (default:
        ``recent_window`` steps, ``SESSION_GPU_READINGS_MIN`` readings)."""
        with self._lock:  # copies only: the collector waits for this lock (8 192 ranks: ~20 ms, not seconds)
            self._settle()
            n = self._rows
            keep = min(self._R, max(self._K if least is None else least, budget // max(n, 1)))
            count = self._rank["count"][:n].astype(np.int64)
            recent = self._newest_locked(np.arange(n), keep, count, tuple(self._recent))
            rank_of_row = self._rank_arr[:n].copy()
            counters = dict(self._counters, rejected=dict(self._counters["rejected"]), transit=self._transit.snapshot())
            gpu = self._devices.gpu_columns(gpu_budget, SESSION_GPU_READINGS_MIN if least is None else least)
            data = SessionData(agents=list(self._agents.values()), gpu=gpu,
                               host=self._devices.host_columns(), health=health_columns(list(self._health.values())),
                               events=list(self._events), counters=counters, source="live",
                               phase_totals=dict(self._phase_totals))
        recent["step"][np.arange(keep)[None, :] >= count[:, None]] = -1  # slots a rank has not filled yet
        data.steps = recent_columns(rank_of_row, recent, n)
        return data

    # ---- Bulk load (a reopened recording) ------------------------------------------------------------------------

    def load_steps(self, steps: Columns, last_seen_s: dict[int, float] | None = None) -> None:
        """Take many recorded steps at once (vectorized): the state ingesting them one by one would leave.

        For a store that has not taken steps yet (a reopened session): the bucket width first doubles until the
        steps' whole span fits the ring. ``last_seen_s`` gives each rank's last receive time (default: its last
        step's end).
        """
        if len(steps["rank"]) == 0:
            return
        with self._lock:
            self._settle()
            order = np.argsort(steps["end_s"], kind="stable")  # as they would have arrived
            matrix = columns_matrix(steps)[order]
            self._version += 1
            ranks, end = self._take_steps(matrix, None)
            unique, at = np.unique(ranks, return_inverse=True)  # each rank's last end: one pass, not one per rank
            last_end = np.full(unique.size, np.nan)
            np.fmax.at(last_end, at, end)  # fmax: a NaN end is no end
            for rank, last in zip(unique.tolist(), last_end.tolist(), strict=True):
                self._rank["last_seen_s"][self._row_of[rank]] = (last_seen_s or {}).get(rank, last)

    # ---- Ingest --------------------------------------------------------------------------------------------------

    def _take(self, agent_id: str, record: Any, recv_s: float) -> None:
        if isinstance(record, Step):
            pending = self._pending
            pending.append((agent_id, record))
            if len(pending) >= PENDING_STEPS:
                self._settle()
        elif isinstance(record, GpuSample):
            self._devices.take_gpu(record)
        elif isinstance(record, HostSample):
            self._devices.take_host(record)
        elif isinstance(record, Hello):
            if record.agent_id not in self._agents:  # a new agent (a restart): what came before it goes first
                self._settle()
            self._take_hello(record)
        elif isinstance(record, Health):
            if self._agent_dropped.get(agent_id) != record.dropped_records:
                self._loss_version += 1
            self._health[agent_id] = record
            self._agent_dropped[agent_id] = record.dropped_records
        elif isinstance(record, Event):
            self._events.append(record)
            if record.event == EventKind.FINISHED:
                self._settle()  # it follows the steps it ends
                ranks = self._agent_ranks.get(agent_id) or ({record.rank} if record.rank is not None else set())
                for rank in ranks:
                    row = self._row_of.get(rank)
                    if row is not None:
                        self._rank["finished"][row] = 1.0

    def _take_hello(self, hello: Hello) -> None:
        known = hello.agent_id in self._agents
        announced = min(hello.world_size, self._max_ranks)
        if announced > self._cap:
            # The run says how many ranks will come: room for all of them at once instead of a doubling (and a copy
            # of every matrix) each time the join storm outgrows it. The pages are reserved, not written, until a rank
            # takes its row.
            self._grow(announced)
        self._agents[hello.agent_id] = hello
        ranks = set(hello.ranks) or {hello.rank}
        self._agent_ranks[hello.agent_id] = ranks
        for rank in ranks:
            try:
                row = self._row(rank)
            except _RankCapError:
                self._counters["records_beyond_rank_cap"] += 1
                continue
            self._rank_agents.setdefault(rank, set()).add(hello.agent_id)
            self._loss_version += 1
            self._rank_hosts[row] = hello.host
            self._hosts_version += 1
            if not known:
                self._rank["finished"][row] = 0.0  # a new agent for this rank: a restart, running again

    def _settle(self) -> None:
        """Take the steps handed over since the last reader into the rings, all at once (lock held)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        matrix, agents, bad = pending_matrix(pending)
        self._counters["bad_records"] += bad
        self._take_steps(matrix, agents)

    def _take_steps(self, steps: np.ndarray, agents: list[str] | None) -> tuple[np.ndarray, np.ndarray]:
        """Steps (a step matrix, arrival order; ``agents``: who sent each, None for a recording's) into the rings,
        the time buckets and the totals, as taking them one by one would. Returns the ranks and ``end_s`` of those
        kept: a rank beyond the cap is counted, not kept. Lock held."""
        ranks = steps[:, COLUMN["rank"]].astype(np.int64)
        unique, inverse = np.unique(ranks, return_inverse=True)
        row_of = self._row_of
        unique_rows = [row_of.get(rank, -1) for rank in unique.tolist()]
        for i, row in enumerate(unique_rows):
            if row < 0:  # a rank without a Hello yet
                try:
                    unique_rows[i] = self._row(int(unique[i]))
                except _RankCapError:
                    pass
        if agents is not None:
            pairs = set(zip(agents, ranks.tolist(), strict=True))
            for agent_id, rank in pairs - self._agent_rank_pairs:  # a rank stepping for an agent not seen with it
                row = row_of.get(rank, -1)
                if row < 0:
                    continue  # beyond the cap
                self._agent_rank_pairs.add((agent_id, rank))
                known = self._rank_agents.setdefault(rank, set())
                if agent_id not in known:
                    known.add(agent_id)
                    self._loss_version += 1
                    self._rank["finished"][row] = 0.0  # steps from a new agent for this rank: it restarted
                self._agent_ranks.setdefault(agent_id, set()).add(rank)
        rows = np.array(unique_rows, np.int64)[inverse]
        kept = rows >= 0
        if not kept.all():
            self._counters["records_beyond_rank_cap"] += int((~kept).sum())
            steps, ranks, rows = steps[kept], ranks[kept], rows[kept]
        count = rows.size
        end = steps[:, COLUMN["end_s"]]
        if count == 0:
            return ranks, end
        take_recent(self._recent, self._rank, rows, steps)
        into_ring(self._end_ring, self._steps_total, end)
        self._steps_total += count
        cols = {name: steps[:, i] for name, i in COLUMN.items()}
        latest = add_phase_totals(self._phase_totals, cols)
        if latest == latest and not latest <= self._latest_end_s:  # NaN: no finite end among them
            self._latest_end_s = latest
        steady = ~(cols["first_batch"] > 0) & np.isfinite(end)  # start-up data waits stay out of the pictures
        self._counters["late_steps"] += self._buckets.load(rows[steady], end[steady],
                                                           {name: column[steady] for name, column in cols.items()})
        return ranks, end

    def _count_second(self, recv_s: float) -> None:
        sec = int(recv_s)
        slot = sec % self._sec_abs.size
        if self._sec_abs[slot] != sec:
            self._sec_abs[slot] = sec
            self._sec_msgs[slot] = 0
        self._sec_msgs[slot] += 1

    # ---- Rows ----------------------------------------------------------------------------------------------------

    def _row(self, rank: int) -> int:
        row = self._row_of.get(rank)
        if row is None:
            if self._rows >= self._max_ranks:
                raise _RankCapError(rank)
            if self._rows == self._cap:
                self._grow(self._cap * 2)
            row = self._rows
            self._rows += 1
            self._row_of[rank] = row
            self._buckets.use(self._rows)
            self._rank_arr[row] = rank
            self._rank["last_seen_s"][row] = time.time()
            self._loss_version += 1  # a new row: the per-rank drops / gaps arrays change shape
        return row

    def _grow(self, cap: int) -> None:
        """Room for ``cap`` rank rows. The large per-row arrays (recent steps, time buckets) are only reserved:
        zeroed memory that the kernel maps when first written, so growing costs a copy of what is in use, and a hello
        can size the store for its whole announced run."""
        def grown(array: np.ndarray, fill: float) -> np.ndarray:
            out = np.full((cap, *array.shape[1:]), fill, dtype=array.dtype)
            out[: array.shape[0]] = array
            return out

        rows = self._rows
        filled = min(self._R, int(self._rank["count"][:rows].max())) if rows else 0  # slots any rank has filled
        self._recent = grown_recent(self._recent, cap, rows, filled)
        self._rank_arr = grown(self._rank_arr, 0)
        self._rank = {name: grown(a, 0.0 if name in ("finished", "count") else np.nan) for name, a in
                      self._rank.items()}
        self._buckets.grow(cap)
        self._rank_hosts.extend(["?"] * (cap - len(self._rank_hosts)))
        self._cap = cap

    # ---- Snapshot support ----------------------------------------------------------------------------------------

    def _copy_locked(self) -> dict[str, Any]:
        n = self._rows
        buckets = self._buckets
        buckets.refresh(n)
        order = np.argsort(self._rank_arr[:n], kind="stable")
        rows: Any = slice(0, n) if np.array_equal(order, np.arange(n)) else order  # arrival order is usually sorted
        count = self._rank["count"][rows].astype(np.int64)
        row_ids = np.arange(n) if isinstance(rows, slice) else rows
        valid = np.arange(self._K)[None, :] < count[:, None]
        recent = self._newest_locked(row_ids, self._K, count,
                                     ("step_s", "data_wait_s", "compute_s", "comm_exposed_s", "first_batch"))
        split = buckets.split
        ranks = self._rank_arr[rows].copy()
        gpus, hosts = self._devices.frame()
        drops, gaps = self._losses_locked(ranks)
        return {
            "version": self._version, "ranks": ranks, "hosts": self._hosts_tuple_locked(order),
            # rows may be a slice: copy, or the frame's arrays would keep changing under the views
            "last_seen_s": self._rank["last_seen_s"][rows].copy(), "finished": self._rank["finished"][rows].copy(),
            "current_step": self._rank["current_step"][rows].copy(), "recent": recent, "valid": valid,
            "heat": {name: self._heat_pool.copy(name, heat, rows, n, split, buckets.col_stamp)
                     for name, heat in buckets.heat.items()},
            **buckets.frame(), "drops": drops, "gaps": gaps,
            "hellos": list(self._agents.values()), "gpus": gpus, "hosts_state": hosts,
            "sec_abs": self._sec_abs.copy(), "sec_msgs": self._sec_msgs.copy(),
            "counters": dict(self._counters, rejected=dict(self._counters["rejected"]),
                             agents=len(self._agents), agent_dropped_records=sum(self._agent_dropped.values())),
            "rank_steps": count, "rank_samples": self._rank["samples"][rows].copy(),
            "steps_total": self._steps_total, "latest_end_s": self._latest_end_s,
            "run_id": self.run_id, "ended": self._ended,
        }

    def _hosts_tuple_locked(self, order: np.ndarray) -> tuple[str, ...]:
        key = (self._hosts_version, self._rows)  # hosts change with hellos; the order only with new rows
        if self._hosts_cache is None or self._hosts_cache[0] != key:
            self._hosts_cache = (key, tuple(self._rank_hosts[i] for i in order.tolist()))
        return self._hosts_cache[1]

    def _newest_locked(self, row_ids: np.ndarray, k: int, count: np.ndarray,
                       names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The newest ``k`` ring slots (newest first) of rows ``row_ids`` whose step counts are ``count``, as (rows x
        ``k``) arrays: one flat gather per field over the slot-major rings, the same index for all of them, no
        per-rank loop. Slots past a row's count hold nothing meaningful: the caller masks them."""
        back = np.arange(k)[None, :]
        flat = (((count[:, None] - 1 - back) % self._R) * self._cap + row_ids[:, None]).ravel()
        return {name: self._recent[name].reshape(-1).take(flat).reshape(row_ids.size, k) for name in names}

    def _losses_locked(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._loss_cache is not None and self._loss_cache[0] == self._loss_version:
            return self._loss_cache[1], self._loss_cache[2]
        agents = [self._rank_agents.get(int(r), ()) for r in ranks]
        drops = np.array([sum(self._agent_dropped.get(a, 0) for a in group) for group in agents], np.int64)
        gaps = np.array([sum(self._agent_missing.get(a, 0) for a in group) for group in agents], np.int64)
        self._loss_cache = (self._loss_version, readonly(drops), readonly(gaps))
        return drops, gaps


class _RankCapError(Exception):
    """A record names a rank beyond the store's rank cap (counted, not kept)."""
