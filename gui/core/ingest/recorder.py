"""Records everything the collector accepts into one SQLite session file (an ``IngestSink``).

What it owns: the session file, one writer thread, and a hand-off queue between the collector's thread and the
writer, bounded in bytes (``wire.Batch.memory_bytes``, an upper estimate of what a decoded message holds). Tables
derive from ``ringscope.agent.schema.FIELDS`` (see ``ringscope.gui.core.ingest.session``): one per record kind with
``agent_id``,
``recv_s`` and the schema fields; ``meta`` (key/value), ``gaps`` (lost and joined-late ranges), ``sequences`` (per
agent: first and last sequence number seen, messages, records) and ``rejections``.

What it must never do: block the collector's thread (``on_batch`` is an append; when the queue is full the batch
is dropped and counted in ``meta.recorder_dropped_records``), stop writing because of one bad batch (a batch that
fails is retried row by row; only the rows that fail are dropped, counted in ``write_errors`` and logged), build
secondary indexes while recording (they are built at ``close``), or lose what was handed to it before ``close``
returns.

Durability: WAL with ``synchronous=NORMAL``; every committed batch survives a SIGKILL of this process (shared
ENVIRONMENT.md), and the ingest counters and the ``sequences`` table are written in the same transaction as the
rows they count.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from ringscope.agent import wire
from ringscope.agent.schema import FIELDS, SCHEMA_VERSION, Event, Hello, Record, schema_version_str
from ringscope.gui.core.ingest import blocks, transit
from ringscope.gui.core.ingest.session import (
    FORMAT_NAME,
    INDEXES,
    create_statements,
    insert_statement,
    stored_positions,
)
from ringscope.gui.core.ingest.sink import JOINED_LATE, Gap, Rejection

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S: Final[float] = 0.2
CLOSE_STALL_S: Final[float] = 10.0
"""``close`` gives up on a writer that made no progress for this long (a hung disk), never on a slow one."""
_PROGRESS_OPS: Final[int] = 20_000  # SQLite VM steps between two progress marks (~1 ms of inserting)
TRANSIT_WRITE_S: Final[float] = 2.0  # how often the per-agent transit statistics are rewritten
FLUSH_BYTES: Final[int] = 8 * 1024 * 1024
"""The writer commits every ``FLUSH_INTERVAL_S`` or as soon as this many bytes (~25 000 steps) are waiting."""

QUEUE_CAPACITY_BYTES: Final[int] = 256 * 1024 * 1024
"""Estimated memory the hand-off queue may hold (with what the writer is writing) before batches are dropped and
counted: ~650 000 steps, 6 s of 1024 ranks x 100 steps/s. The ingest benchmark (that load, simulated on the same
2-core machine while others ran tests) peaked at 179 MB of backlog: the writer is starved of CPU long before the
disk is the limit."""

MAX_STORED_REJECTIONS: Final[int] = 10_000
"""Rejections stored with their text; beyond this only the counts per reason grow (a flood must not fill the disk)."""

_ITEM_BYTES: Final[int] = 256  # what a queued gap or rejection costs the budget (plus its text)
_DETAIL_CHARS: Final[int] = 1000  # longest rejection text stored
_LOG_EVERY_S: Final[float] = 10.0
_WRITE_ERRORS: Final = (sqlite3.Error, ValueError, TypeError, OverflowError, RecursionError, MemoryError)

RINGSCOPE_VERSION: Final[str] = "0.1.0"


class Recorder:
    """An ``IngestSink`` that writes a session file. ``start()`` before adding it to a collector; ``close()`` last.

    Args:
        path: the session file to create (an existing file is refused, so a session is never overwritten).
        meta: extra key/value pairs for the ``meta`` table (e.g. the command line that produced it).
        queue_capacity_bytes: estimated memory of what waits for the writer beyond which batches are dropped
            (and counted), gap rows and rejection texts are not stored (their counts are).
    """

    def __init__(self, path: str | Path, *, meta: Mapping[str, str] | None = None,
                 queue_capacity_bytes: int = QUEUE_CAPACITY_BYTES) -> None:
        self.path = Path(path)
        self._capacity = queue_capacity_bytes
        self._meta = {str(k): str(v) for k, v in (meta or {}).items()}
        # (kind of item, payload, ts, cost in bytes): "batch" Batch, "gap" Gap (lost or joined late), "rejection"
        # Rejection, "launch" tuple
        self._queue: deque[tuple[str, Any, float, int]] = deque()
        # Queue depth in bytes = enqueued - dequeued; each counter has a single writer thread, so no lock.
        self._enqueued_bytes = 0
        self._dequeued_bytes = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connection: sqlite3.Connection | None = None
        self._rows_written = 0
        self._progress = 0  # SQLite progress marks: a long transaction or index build moving
        self._in_flight_records = 0  # records the writer took from the queue and has not committed yet
        # written by the collector's thread only
        self._dropped_records = 0
        self._unstored_gaps: Counter[str] = Counter()  # "gaps" / "missing" of gap rows the full queue refused
        self._rejections_queued = 0
        self._rejected_lock = threading.Lock()
        self._rejected: Counter[str] = Counter()  # every rejection by reason, stored or not
        # written by the writer thread only
        self._counts: Counter[str] = Counter()  # messages, records, gaps, missing_messages, joined_late, ...
        self._run_ids: set[str] = set()
        self._run_ids_written: set[str] = set()
        # agent_id -> [first_seq, last_seq, messages, records, first_recv_s, last_recv_s]
        self._sequences: dict[str, list[Any]] = {}
        self._committed: dict[str, int] = {}  # agent_id -> highest seq committed (read by the collector's thread)
        self._transit = transit.TransitTracker()  # per agent: how long its messages queued on the way
        # statistics, not records: their rows are rewritten every TRANSIT_WRITE_S (and at close), not every commit
        self._transit_due: set[str] = set()
        self._transit_next = 0.0
        self._write_errors = 0
        self._last_write_error: str | None = None
        self._last_error_log = -_LOG_EVERY_S
        self._closed = False
        self._converters = {kind: _row_converter(kind) for kind in FIELDS}

    # ---- Public API ----------------------------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Create the file and its tables and start the writer thread. Raises ``FileExistsError`` / OSError."""
        if self._thread is not None:
            return self
        if self.path.exists():
            raise FileExistsError(f"session file {self.path} already exists; choose a new --out path or delete it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        with _transaction(connection):
            for statement in create_statements():
                connection.execute(statement)
            meta = {
                "format": FORMAT_NAME,
                "schema_version": schema_version_str(),
                "schema_major": str(SCHEMA_VERSION[0]),
                "created_s": repr(time.time()),
                "ringscope_version": RINGSCOPE_VERSION,
                "run_ids": "[]",
                **self._meta,
            }
            connection.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items())
        connection.set_progress_handler(self._on_progress, _PROGRESS_OPS)
        self._connection = connection
        self._thread = threading.Thread(target=self._run, name="ringscope-recorder", daemon=True)
        self._thread.start()
        return self

    def committed_seqs(self) -> Mapping[str, int]:
        """Per agent, the highest sequence number committed to the file (what the collector acknowledges)."""
        return self._committed

    @property
    def rows_written(self) -> int:
        """Record rows committed so far (all kinds)."""
        return self._rows_written

    @property
    def dropped_records(self) -> int:
        """Records dropped because the writer fell too far behind (0 in a healthy session)."""
        return self._dropped_records

    @property
    def write_errors(self) -> int:
        """Rows (records, gaps, rejections) that could not be written to the file (0 in a healthy session)."""
        return self._write_errors

    @property
    def last_write_error(self) -> str | None:
        """The text of the most recent write error, or None."""
        return self._last_write_error

    @property
    def file_bytes(self) -> int:
        """Size of the session on disk, including the write-ahead log."""
        total = 0
        for suffix in ("", "-wal"):
            candidate = self.path.with_name(self.path.name + suffix)
            if candidate.exists():
                total += candidate.stat().st_size
        return total

    def close(self, timeout_s: float = CLOSE_STALL_S) -> None:
        """Write everything received so far, build indexes, and close the file. Idempotent.

        Waits as long as the writer makes progress (a backlog of hundreds of MB takes a while, and every row of it
        was received); gives up only after ``timeout_s`` without any (a hung disk). What is then still unwritten
        is counted in ``write_errors``, never lost silently.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            last: tuple[int, int, int] | None = None
            idle_since = time.monotonic()
            while True:
                self._thread.join(min(0.25, timeout_s))
                if not self._thread.is_alive():
                    break
                mark, now = (self._progress, self._rows_written, len(self._queue)), time.monotonic()
                if mark != last:
                    last, idle_since = mark, now
                elif now - idle_since >= timeout_s:
                    unwritten = self._in_flight_records + _records_in(list(self._queue))
                    self._write_errors += unwritten
                    self._last_write_error = (f"the writer made no progress for {timeout_s:g} s at close (is the "
                                              f"disk hung?): {unwritten} record(s) not written")
                    log.error("%s: %s; the file holds what was committed", self.path, self._last_write_error)
                    return
        if self._write_errors:
            log.error("%d row(s) could not be written to %s (last error: %s); the file holds everything else",
                      self._write_errors, self.path, self._last_write_error)

    # ---- IngestSink (collector thread: appends only) -------------------------------------------------------------

    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        """Queue a batch for writing; drop (and count) it when the writer is hopelessly behind."""
        cost = batch.memory_bytes or batch.size_bytes + wire.RECORD_MEMORY_BYTES * len(batch.records)
        if not self._enqueue("batch", batch, recv_s, cost):
            self._dropped_records += len(batch.records)

    def on_gap(self, gap: Gap) -> None:
        """Queue a gap row (its counts are kept even when the full queue refuses the row)."""
        if not self._enqueue("gap", gap, gap.ts_s, _ITEM_BYTES):
            self._unstored_gaps["joined_late" if gap.kind == JOINED_LATE else "gaps"] += 1
            self._unstored_gaps["missing_before_join" if gap.kind == JOINED_LATE else "missing"] += gap.missing

    def on_joined_late(self, gap: Gap) -> None:
        """Queue a joined-late row: messages the agent sent before this collector heard from it."""
        self.on_gap(gap)

    def on_rejection(self, rejection: Rejection) -> None:
        """Count a rejection; store its text up to ``MAX_STORED_REJECTIONS`` and while the queue has room."""
        with self._rejected_lock:
            self._rejected[rejection.reason] += 1
        if self._rejections_queued < MAX_STORED_REJECTIONS:
            detail = rejection.detail[:_DETAIL_CHARS]
            if self._enqueue("rejection", Rejection(rejection.reason, detail, rejection.ts_s, rejection.size_bytes),
                             rejection.ts_s, _ITEM_BYTES + len(detail)):
                self._rejections_queued += 1

    def _enqueue(self, what: str, payload: Any, ts_s: float, cost: int) -> bool:
        queued = self._enqueued_bytes - self._dequeued_bytes
        if queued + cost > self._capacity or self._closed:
            return False
        self._enqueued_bytes += cost
        self._queue.append((what, payload, ts_s, cost))
        if queued + cost >= FLUSH_BYTES:
            self._wake.set()
        return True

    # ---- Run lifecycle (GUI thread) ------------------------------------------------------------------------------

    def note_launch(self, run_id: str, state: str, exit_code: int | None, ts_s: float, detail: str = "") -> None:
        """Record how a run the window launched ended (stopped / failed / finished): agents cannot say it."""
        self._queue.append(("launch", (run_id, state, exit_code, ts_s, detail), ts_s, 0))
        self._wake.set()

    def note_event(self, agent_id: str, event: Event) -> None:
        """Record an event the app observed about an agent's run (a hang): stored as if that agent had sent it, so
        it belongs to the agent's run, without touching the agent's message counts and sequence numbers."""
        self._queue.append(("event", (agent_id, event), event.ts_s, 0))
        self._wake.set()

    # ---- Writer thread -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        connection = self._connection
        assert connection is not None
        try:
            while True:
                self._wake.wait(FLUSH_INTERVAL_S)
                self._wake.clear()
                stopping = self._stop.is_set()
                try:
                    self._write_pending(connection)
                except Exception as exc:  # a bug must cost one batch, never the rest of the session
                    self._write_failed(exc, 1, "writing a batch")
                if stopping:
                    break
            self._finish(connection)
        except Exception as exc:  # building indexes at close: the rows are committed already
            self._write_failed(exc, 0, "finishing the file")
        finally:
            connection.close()

    def _write_pending(self, connection: sqlite3.Connection) -> None:
        queue = self._queue
        items = [queue.popleft() for _ in range(len(queue))]
        if not items:
            return
        self._in_flight_records = _records_in(items)
        try:
            self._write_items(connection, items)
        finally:
            # Released only now: until written, the items are still in memory (the budget bounds both together).
            self._dequeued_bytes += sum(item[3] for item in items)
            self._in_flight_records = 0

    def _on_progress(self) -> int:
        """SQLite's progress handler (every ``_PROGRESS_OPS`` VM steps): ``close`` sees a long write move."""
        self._progress += 1
        return 0

    def _write_items(self, connection: sqlite3.Connection, items: list[tuple[str, Any, float, int]]) -> None:
        rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in FIELDS}
        tables: dict[str, list[tuple[Any, ...]]] = {"gaps": [], "rejections": [], "launches": []}
        counts = self._counts
        touched: set[str] = set()
        for what, payload, ts, _ in items:
            self._progress += 1
            if what == "batch":
                self._batch_rows(payload, ts, rows)
                touched.add(payload.agent_id)
            elif what == "launch":
                tables["launches"].append(payload)
            elif what == "event":
                agent_id, event = payload
                rows["event"].append(self._converters["event"](agent_id, ts, event))
            elif what == "gap":
                late = payload.kind == JOINED_LATE
                tables["gaps"].append((payload.agent_id, payload.expected_seq, payload.got_seq, payload.missing, ts,
                                       payload.kind))
                counts["joined_late" if late else "gaps"] += 1
                counts["missing_before_join" if late else "missing_messages"] += payload.missing
            else:
                tables["rejections"].append((payload.reason, payload.detail, ts, payload.size_bytes))
        tables["sequences"] = [(agent_id, *self._sequences[agent_id]) for agent_id in touched]
        self._transit_due |= touched
        if time.monotonic() >= self._transit_next:
            tables["transit"] = self._transit_rows()
        records = sum(len(r) for r in rows.values())
        try:
            with _transaction(connection):
                self._insert(connection, rows, tables, row_by_row=False)
            failed = 0
        except _WRITE_ERRORS as exc:
            # One bad row (or a full disk) must not cost the batch, let alone the session: retry row by row, keep
            # what can be written, count and report the rest.
            total = records + sum(len(t) for t in tables.values())
            self._write_failed(exc, 0, f"writing a batch of {total} rows; retrying row by row")
            counted = self._write_errors
            try:
                with _transaction(connection):
                    failed = self._insert(connection, rows, tables, row_by_row=True)
            except _WRITE_ERRORS as again:
                self._write_errors = counted  # the rows dropped one by one are in the total
                self._write_failed(again, total, "writing rows one by one")
                return
        self._run_ids_written = set(self._run_ids)
        self._rows_written += records - failed
        committed = self._committed
        for agent_id in touched:  # acknowledged to the agents by the collector: they may forget these now
            committed[agent_id] = self._sequences[agent_id][1]

    def _insert(self, connection: sqlite3.Connection, rows: dict[str, list[tuple[Any, ...]]],
                tables: dict[str, list[tuple[Any, ...]]], *, row_by_row: bool) -> int:
        """Insert everything of one commit; with ``row_by_row`` a failing row is dropped (and counted) alone.
        Returns how many record rows failed."""
        statements = [(kind, insert_statement(kind), kind_rows) for kind, kind_rows in rows.items()]
        statements += [(name, _TABLE_INSERTS[name], table_rows) for name, table_rows in tables.items()]
        failed_records = 0
        for table, statement, statement_rows in statements:
            if not statement_rows:
                continue
            if not row_by_row:
                if table == "step":  # the rows and their columnar copy, in the same transaction
                    last = connection.execute('SELECT IFNULL(MAX(rowid), 0) FROM "step"').fetchone()[0]
                    connection.executemany(statement, statement_rows)
                    blocks.write(connection, statement_rows, last + 1)
                else:
                    connection.executemany(statement, statement_rows)
                continue
            for index, row in enumerate(statement_rows):
                try:
                    connection.execute(statement, row)
                except _WRITE_ERRORS as exc:
                    if not connection.in_transaction:  # SQLite gave up on the whole transaction (disk full...)
                        raise
                    self._write_failed(exc, 1, f"row {index} of table {table}")
                    failed_records += table in rows
        connection.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", self._meta_counters())
        return failed_records

    def _batch_rows(self, batch: wire.Batch, recv_s: float, rows: dict[str, list[tuple[Any, ...]]]) -> None:
        agent_id = batch.agent_id
        converters = self._converters
        for record in batch.records:
            kind = record.KIND
            try:
                rows[kind].append(converters[kind](agent_id, recv_s, record))
            except _WRITE_ERRORS as exc:  # validation should make this impossible: never let it stop the writer
                self._write_failed(exc, 1, f"converting a {kind} record of agent {agent_id[:80]!r}")
                continue
            if kind == "hello":
                assert isinstance(record, Hello)
                self._run_ids.add(record.run_id)
        counts = self._counts
        counts["messages"] += 1
        counts["records"] += len(batch.records)
        counts["skipped_records"] += batch.skipped
        self._transit.observe(agent_id, batch.sent_s, recv_s)
        sequence = self._sequences.get(agent_id)
        if sequence is None:
            self._sequences[agent_id] = [batch.seq, batch.seq, 1, len(batch.records), recv_s, recv_s]
        else:
            sequence[1] = batch.seq
            sequence[2] += 1
            sequence[3] += len(batch.records)
            sequence[5] = recv_s

    def _write_failed(self, exc: BaseException, rows: int, what: str) -> None:
        """Count rows that could not be written and say so loudly (rate-limited: a full disk fails every batch)."""
        self._write_errors += rows
        self._last_write_error = f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
        now = time.monotonic()
        if now - self._last_error_log >= _LOG_EVERY_S:
            self._last_error_log = now
            log.error("recorder: write error in %s (%s); %d row(s) not written so far, recording continues",
                      self.path, self._last_write_error, self._write_errors)

    def _meta_counters(self) -> list[tuple[str, str]]:
        counts = self._counts
        unstored = dict(self._unstored_gaps)
        with self._rejected_lock:
            rejected = json.dumps(dict(self._rejected), sort_keys=True)
        meta = [
            ("messages", str(counts["messages"])),
            ("records", str(counts["records"])),
            ("gaps", str(counts["gaps"] + unstored.get("gaps", 0))),
            ("missing_messages", str(counts["missing_messages"] + unstored.get("missing", 0))),
            ("joined_late", str(counts["joined_late"] + unstored.get("joined_late", 0))),
            ("missing_before_join", str(counts["missing_before_join"] + unstored.get("missing_before_join", 0))),
            ("rejected", rejected),
            ("skipped_records", str(counts["skipped_records"])),
            ("recorder_dropped_records", str(self._dropped_records)),
            ("write_errors", str(self._write_errors)),
            ("last_write_error", self._last_write_error or ""),
            ("agents", str(len(self._sequences))),
            ("updated_s", repr(time.time())),
        ]
        if self._run_ids != self._run_ids_written:  # written when the set changes, not on every commit
            meta.append(("run_ids", json.dumps(sorted(self._run_ids))))
        return meta

    def _transit_rows(self) -> list[tuple[str, int, float, str]]:
        rows = self._transit.rows(self._transit_due)
        self._transit_due = set()
        self._transit_next = time.monotonic() + TRANSIT_WRITE_S
        return rows

    def _finish(self, connection: sqlite3.Connection) -> None:
        """Indexes are built once at the end: maintaining them per insert costs ~10x (shared ENVIRONMENT.md)."""
        started = time.monotonic()
        with _transaction(connection):
            connection.executemany(transit.INSERT, self._transit_rows())
            for statement in INDEXES:
                connection.execute(statement)
            connection.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                   [*self._meta_counters(), ("closed_s", repr(time.time()))])
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        log.debug("indexes built in %.2f s", time.monotonic() - started)


# ---- Helpers -----------------------------------------------------------------------------------------------------


def _records_in(items: list[tuple[str, Any, float, int]]) -> int:
    """Records held by queued writer items (batches; gaps, rejections and launch notes hold none)."""
    return sum(len(payload.records) for what, payload, _, _ in items if what == "batch")


@contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN ... COMMIT (ROLLBACK on error) on an autocommit connection."""
    connection.execute("BEGIN")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:  # SQLite rolls back by itself on some errors (disk full)
            connection.execute("ROLLBACK")
        raise


_TABLE_INSERTS: Final[dict[str, str]] = {
    "gaps": "INSERT INTO gaps(agent_id, expected_seq, got_seq, missing, ts_s, kind) VALUES (?, ?, ?, ?, ?, ?)",
    "rejections": "INSERT INTO rejections(reason, detail, ts_s, size_bytes) VALUES (?, ?, ?, ?)",
    "launches": "INSERT INTO launches(run_id, state, exit_code, ts_s, detail) VALUES (?, ?, ?, ?, ?)",
    "transit": transit.INSERT,
    "sequences": "INSERT OR REPLACE INTO sequences(agent_id, first_seq, last_seq, messages, records, first_recv_s, "
                 "last_recv_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
}


def _row_converter(kind: str) -> Callable[[str, float, Record], tuple[Any, ...]]:
    """A function making one table row from a record; list fields become JSON text."""
    specs = FIELDS[kind]
    positions = stored_positions(kind)
    list_positions = [i for i in positions if list in specs[i].types]
    record_values = wire.record_values
    if not list_positions and len(positions) == len(specs):
        def plain(agent_id: str, recv_s: float, record: Record) -> tuple[Any, ...]:
            return (agent_id, recv_s, *record_values(record))
        return plain

    def general(agent_id: str, recv_s: float, record: Record) -> tuple[Any, ...]:
        values = list(record_values(record))
        for i in list_positions:
            if values[i] is not None:
                values[i] = json.dumps(values[i], separators=(",", ":"))
        return (agent_id, recv_s, *(values[i] for i in positions))
    return general
