"""The exporter's ``prometheus_client`` Collector: every metric family built on scrape from a ``LiveRuns``.

What it owns: which runs are exported (``MetricsLimits``), the run-level families (state, idle share and main cause,
straggler, throughput, cost so far and the cost of waiting), and the ingest counters of the collector and the
recorder. Per-rank families come from ``ringscope.gui.core.metrics.ranks``, GPU families from
``ringscope.gui.core.metrics.gpus``.

Nothing is updated on the ingest thread: a scrape asks ``LiveRuns.rows`` and each exported run's ``LiveStore`` for
a snapshot (the same immutable ``Snapshot`` a window frame draws) and turns it into families, so an idle exporter
costs nothing and two scrapes never see half an update.

What it must never do: raise into the HTTP server (a failed scrape is logged and counted, the ingest counters
still come back), emit a missing reading as 0, or import Qt.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.analysis.goodput import CAUSES as GOODPUT_CAUSES
from ringscope.gui.core.analysis.runs import ENDED_STATES, RUN_STATES
from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.run_rows import RunRow
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.metrics.families import Families, MetricsLimits
from ringscope.gui.core.metrics.gpus import add_gpu_families
from ringscope.gui.core.metrics.ranks import RUN_LABELS, add_rank_families

log = logging.getLogger(__name__)

_STRAGGLER_LABELS: Final[tuple[str, ...]] = ("run", "rank", "host", "cause", "framework", "strategy")
_NO_LABELS: Final[tuple[str, ...]] = ()


class RecorderFigures(Protocol):
    """What the exporter reads of a recorder (``ringscope.gui.core.ingest.recorder.Recorder`` has it)."""

    @property
    def rows_written(self) -> int:
        """Rows committed to the session file."""

    @property
    def dropped_records(self) -> int:
        """Records dropped because the recorder's queue was full."""


class LiveRunsCollector(Collector):
    """Builds the Ringscope families on each scrape. Register it with a ``CollectorRegistry``.

    Args:
        runs: the live runs (an ``IngestSink`` of the app's or ``record``'s collector).
        counters: the ingest collector's cumulative counters (``lambda: collector.counters``), or None.
        recorder: the session recorder, or None when nothing is recorded.
        price_per_gpu_hour: the price to value time at now (None: the default price, and the series say so).
        limits: the cardinality caps.
        clock: wall clock (tests pass their own).
    """

    def __init__(self, runs: LiveRuns, *, counters: Callable[[], IngestCounters] | None = None,
                 recorder: RecorderFigures | None = None,
                 price_per_gpu_hour: Callable[[], float | None] | None = None,
                 limits: MetricsLimits | None = None, clock: Callable[[], float] = time.time) -> None:
        self._runs = runs
        self._counters = counters
        self._recorder = recorder
        self._price = price_per_gpu_hour or (lambda: None)
        self.limits = limits or MetricsLimits()
        self._clock = clock
        self._lock = threading.Lock()  # one scrape at a time: concurrent scrapes would only repeat the work
        self._errors = 0
        self._last_error_log = -math.inf

    # ---- Public API ----------------------------------------------------------------------------------------------

    def describe(self) -> list[Metric]:
        """No fixed set of names (families appear with data): registering collects nothing."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The families of one scrape."""
        with self._lock:
            started = time.perf_counter()
            families = Families()
            exported = 0
            try:
                exported = self._add_runs(families, self._clock())
            except Exception:  # a scrape must answer: count it and keep the ingest counters
                self._errors += 1
                if time.monotonic() - self._last_error_log > 60.0:
                    self._last_error_log = time.monotonic()
                    log.exception("metrics: could not build the run families (logged at most once a minute)")
            self._add_ingest(families)
            families.counter("ringscope_exporter_errors", "Scrapes whose run families could not be built (see "
                             "the log).", _NO_LABELS, (), self._errors)
            families.gauge("ringscope_exporter_runs", "Runs exported in this scrape (see the caps in the README).",
                           _NO_LABELS, (), exported)
            families.gauge("ringscope_exporter_collect_seconds", "Time this scrape took to build its families.",
                           _NO_LABELS, (), time.perf_counter() - started)
        yield from families.metrics()

    # ---- Runs ----------------------------------------------------------------------------------------------------

    def _add_runs(self, families: Families, now: float) -> int:
        chosen = select_runs(self._runs.rows(now), now, self.limits)
        given = self._price()
        price = float(given) if given is not None and given > 0 else DEFAULT_PRICE_PER_GPU_HOUR
        families.gauge("ringscope_price_per_device_hour", "Price per GPU-hour the cost series use (per rank-hour "
                       "for CPU-only runs); source: argument or default.", ("source",),
                       ("argument" if given is not None and given > 0 else "default",), price)
        running: list[tuple[str, Snapshot]] = []
        for row in chosen:
            store = self._runs.store(row.run_id) if row.in_memory else None
            snap = store.snapshot(now) if store is not None else None
            self._add_run(families, row, snap, price)
            if snap is not None and row.state not in ENDED_STATES:
                running.append((row.run_id, snap))
        add_gpu_families(families, running, now, self.limits.gpu_stale_s)
        return len(chosen)

    def _add_run(self, families: Families, row: RunRow, snap: Snapshot | None, price: float) -> None:
        run = (row.run_id, row.framework, row.strategy)
        for state in RUN_STATES:
            families.gauge("ringscope_run_state", "1 for the run's lifecycle state, 0 for the others (running, "
                           "finished, stopped, failed, lost, hung, unfinished).", (*RUN_LABELS, "state"),
                           (*run, state), 1.0 if row.state == state else 0.0)
        gauge = self._run_gauge(families, run)
        gauge("ringscope_run_ranks", "Ranks that reported.", row.ranks)
        gauge("ringscope_run_world_size", "World size the agents announced.", row.world_size)
        gauge("ringscope_run_hosts", "Hosts the run's agents run on.", row.hosts)
        gauge("ringscope_run_started_timestamp_seconds", "When the run's first agent started (Unix time).",
              row.started_s)
        gauge("ringscope_run_ended_timestamp_seconds", "When the run ended (Unix time; absent while it runs).",
              row.ended_s)
        gauge("ringscope_run_duration_seconds", "Wall time from the first agent's start to now or to the end.",
              row.duration_s)
        gauge("ringscope_run_steps_per_second", "Steps per second, all ranks together (last 5 s).",
              row.steps_per_s)
        gauge("ringscope_run_samples_per_second", "Samples per second, all ranks together (last 5 s; only when "
              "agents report samples).", row.samples_per_s)
        gauge("ringscope_run_idle_ratio", "Share of step time not computing (data wait + exposed comm + other), "
              "recent steps of every rank: the window's idle share.", row.idle_share)
        families.counter("ringscope_run_steps", "Steps received from every rank of the run.", RUN_LABELS, run,
                         row.steps)
        families.gauge("ringscope_run_devices", "Devices the cost is priced for: GPUs, or ranks of a CPU-only run.",
                       (*RUN_LABELS, "unit"), (*run, row.device_unit), row.devices)
        gauge("ringscope_run_cost", "What the run cost so far: price x devices x priced time (up to its last "
              "message while it runs, to its end after), in the price's currency.",
              row.cost(price) if row.devices else None)  # no device known yet: the cost is unknown, not 0
        gauge("ringscope_run_waiting_cost_per_hour", "What waiting costs per hour now: idle share x devices x "
              "price (the window's 'cost of waiting').", row.idle_share * row.devices * price)
        gauge("ringscope_run_attempts", "Starts of the run: 1, plus one per restart (ringscope run --restart, the "
              "window's Restart automatically, torchrun's own restarts).", row.attempts)
        if row.goodput is not None and row.goodput.wall_s > 0:
            for cause in GOODPUT_CAUSES:
                families.gauge("ringscope_run_goodput_ratio", "Share of the run's wall time by cause; cause="
                               "\"productive\" is the goodput (kept steps less their waiting), the others are where "
                               "the rest went (README, Definitions: goodput).", (*RUN_LABELS, "cause"),
                               (*run, cause), row.goodput.share(cause))
        if snap is None:
            return  # released from memory (beyond LiveRuns' max_runs): the run-level figures are its last ones
        if snap.idle_cause:
            families.gauge("ringscope_run_idle_cause_ratio", "The main cause of idle time (data_wait, comm_exposed "
                           "or other) and its share of step time.", (*RUN_LABELS, "cause"), (*run, snap.idle_cause),
                           snap.idle_cause_share)
        families.counter("ringscope_run_missing_messages", "Messages of the run's agents lost on the way "
                         "(sequence gaps).", RUN_LABELS, run, snap.counters.get("missing_messages"))
        families.counter("ringscope_run_agent_dropped_records", "Records the run's agents dropped (their queue was "
                         "full), as they last reported.", RUN_LABELS, run, snap.counters.get("agent_dropped_records"))
        self._add_straggler(families, run, snap)
        exported = add_rank_families(families, snap, run, self.limits)
        gauge("ringscope_run_ranks_exported", "Ranks of the run with per-rank series (the others are in the "
              "ringscope_ranks_* percentiles).", exported)

    def _add_straggler(self, families: Families, run: tuple[str, str, str], snap: Snapshot) -> None:
        with_steps = int(sum(1 for v in snap.recent_step_s.tolist() if math.isfinite(v)))
        if with_steps >= 2:  # a verdict is possible: none found is a real 0, not a missing reading
            families.gauge("ringscope_run_straggler_found", "1 when a rank makes the others wait in AllReduce, 0 "
                           "when none does (absent with fewer than two ranks with steps).", RUN_LABELS, run,
                           0.0 if snap.straggler is None else 1.0)
        straggler, row = snap.straggler, snap.straggler_row()
        if straggler is None or row is None:
            return
        host = snap.hosts[row] if row < len(snap.hosts) else ""
        labels = (run[0], str(straggler.rank), host, straggler.cause or "unclear", *run[1:])
        families.gauge("ringscope_straggler", "1 for the rank the others wait for in AllReduce; cause: the phase it "
                       "is late in (data_wait, compute, unclear).", _STRAGGLER_LABELS, labels, 1.0)
        families.gauge("ringscope_straggler_others_wait_ratio", "How much of a step the other ranks wait for the "
                       "straggler in AllReduce (share of the median step).", _STRAGGLER_LABELS, labels,
                       straggler.others_wait_share)

    @staticmethod
    def _run_gauge(families: Families, run: tuple[str, str, str]) -> Callable[[str, str, float | None], None]:
        def gauge(name: str, documentation: str, value: float | None) -> None:
            families.gauge(name, documentation, RUN_LABELS, run, value)

        return gauge

    # ---- Ingest --------------------------------------------------------------------------------------------------

    def _add_ingest(self, families: Families) -> None:
        if self._counters is not None:
            counters = self._counters()
            for name, documentation, value in (
                    ("ringscope_collector_messages", "Messages accepted by the collector.", counters.messages),
                    ("ringscope_collector_records", "Records in the accepted messages.", counters.records),
                    ("ringscope_collector_received_bytes", "Bytes of the accepted messages.", counters.bytes),
                    ("ringscope_collector_gaps", "Sequence gaps seen (events).", counters.gaps),
                    ("ringscope_collector_missing_messages", "Messages lost in those gaps.",
                     counters.missing_messages)):
                families.counter(name, documentation, _NO_LABELS, (), value)
            for reason, count in sorted(counters.rejected.items()):
                families.counter("ringscope_collector_rejected_messages", "Messages rejected, by reason (a series "
                                 "appears with the first rejection of its reason).", ("reason",), (reason,), count)
            families.gauge("ringscope_collector_agents", "Agents heard from in this session.", _NO_LABELS, (),
                           counters.agents)
        if self._recorder is not None:
            families.counter("ringscope_recorder_rows_written", "Rows committed to the session file.", _NO_LABELS,
                             (), self._recorder.rows_written)
            families.counter("ringscope_recorder_dropped_records", "Records the recorder dropped (its queue was "
                             "full: the disk did not keep up).", _NO_LABELS, (), self._recorder.dropped_records)


def select_runs(rows: Sequence[RunRow], now_s: float, limits: MetricsLimits) -> list[RunRow]:
    """The runs to export: running (or hung) ones, newest first, then those that ended less than
    ``limits.keep_ended_s`` ago, most recent first; at most ``limits.max_runs``."""
    live = sorted((r for r in rows if r.state not in ENDED_STATES), key=lambda r: r.started_s, reverse=True)
    ended = sorted((r for r in rows if r.state in ENDED_STATES and math.isfinite(r.ended_s)
                    and now_s - r.ended_s <= limits.keep_ended_s), key=lambda r: r.ended_s, reverse=True)
    return (live + ended)[: limits.max_runs]
