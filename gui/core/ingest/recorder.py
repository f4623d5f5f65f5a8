"""Records everything the collector accepts into one SQLite session file (an ``IngestSink``).

What it owns: the session file, one writer thread, and a hand-off queue between the collector's thread and the
writer, bounded in bytes (``wire.Batch.memory_bytes``, an upper estimate of what a decoded message holds). It writes
by the file's schema (``session_schema``: the tables, their statements, how a record becomes a row).

What it must never do: block the collector's thread (``on_batch`` is an append; when the queue is full the batch
is dropped and counted in ``meta.recorder_dropped_records``), stop writing because of one bad batch (a batch that
fails is retried row by row; only the rows that fail are dropped, counted in ``write_errors`` and logged), build
secondary indexes while recording (they are built at ``close``), or lose what was handed to it before ``close``
returns.

Durability: WAL with ``synchronous=NORMAL``; every committed batch survives a SIGKILL of this process (shared
ENVIRONMENT.md), and the ingest counters and the ``sequences`` table are written in the same transaction as the
rows they count. So an ingest process that replaces a crashed one continues the same file (``reopen``: a new
segment, the counters and sequences carried on).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ringscope.agent import wire
from ringscope.agent.control import AttemptNote
from ringscope.agent.schema import FIELDS, SCHEMA_VERSION, Event, Hello
from ringscope.gui.core.ingest import blocks, session_schema, transit
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
        self._unstored_gaps: Counter[str] = Counter()  # COUNTERS of gap rows the full queue refused
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
        self._transit_written: set[str] = set()  # agents whose row is in the file
        self._write_errors = 0
        self._last_write_error: str | None = None
        self._last_error_log = -_LOG_EVERY_S
        self._marked = -1  # the newest mark whose items before it are all committed (``mark``)
        self._marks_stream: str | None = None  # ``resume_marks``: a recorder process's marks are kept in the file
        self.mark_next: int | None = None  # set by a recorder process: the next item queued is followed by mark(it)
        self._resumed_meta: Mapping[str, str] = {}  # the meta of the file ``reopen`` continues
        self._closed = False
        self._converters = {kind: session_schema.row_converter(kind) for kind in FIELDS}

    # ---- Public API ----------------------------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Create the file and its tables and start the writer thread. Raises ``FileExistsError`` / OSError."""
        if self._thread is not None:
            return self
        if self.path.exists():
            raise FileExistsError(f"session file {self.path} already exists; choose a new --out path or delete it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = session_schema.connect_writer(self.path)
        with session_schema.transaction(connection):
            for statement in session_schema.create_statements():
                connection.execute(statement)
            meta = {**session_schema.format_meta(time.time()), **self._meta}
            connection.executemany(session_schema.INSERTS["meta"], meta.items())
        return self._start_writer(connection)

    def reopen(self, reason: str) -> Recorder:
        """Open an existing session file for append, as a new segment of the same session, and start the writer.

        For an ingest process that replaces one that crashed: the file of a killed writer is consistent (SQLite
        rolls back what was not committed), and this recorder carries on from what it holds: the ``sequences``
        rows (merged, never overwritten), the ingest counters in ``meta`` and the run ids. A segment marker is
        appended to ``meta.segments`` (JSON: ``[{"started_s": ...}, {"started_s": ..., "reason": ...}]``; a file
        without it has one segment). Raises ``FileNotFoundError``, or ``ValueError`` naming what is wrong with a
        file that is not a session this version can append to.
        """
        if self._thread is not None:
            return self
        if not self.path.is_file():
            raise FileNotFoundError(f"session file {self.path} does not exist; nothing to continue recording into")
        connection = session_schema.connect_writer(self.path)
        try:
            with session_schema.transaction(connection):
                for statement in session_schema.create_statements():  # tables a later version added are created empty
                    connection.execute(statement)
                for statement in session_schema.added_column_statements(connection):  # fields a later minor added
                    connection.execute(statement)
                segments = self._resume_from(connection)
                segments.append({"started_s": time.time(), "reason": reason})
                connection.execute(session_schema.INSERTS["meta"], ("segments", json.dumps(segments)))
                connection.execute("DELETE FROM meta WHERE key = 'closed_s'")  # being written again
        except (sqlite3.Error, ValueError) as exc:
            connection.close()
            raise ValueError(f"cannot reopen session file {self.path} for append: {exc}") from None
        return self._start_writer(connection)

    def _start_writer(self, connection: sqlite3.Connection) -> Recorder:
        connection.set_progress_handler(self._on_progress, _PROGRESS_OPS)
        self._connection = connection
        self._thread = threading.Thread(target=self._run, name="ringscope-recorder", daemon=True)
        self._thread.start()
        return self

    def committed_seqs(self) -> Mapping[str, int]:
        """Per agent, the highest sequence number committed to the file (what the collector acknowledges)."""
        return self._committed

    def mark(self, token: int) -> None:
        """Queue a mark (never dropped): ``marked`` is ``token`` once all queued before it is committed (or counted
        as dropped or unwritable): what a ``recorder_process`` parent may forget."""
        self._queue.append(("mark", token, 0.0, 0))

    def resume_marks(self, stream: str) -> int:
        """Keep the newest mark of recorder-process parent ``stream`` in the file with each commit from now on;
        returns the one the file holds for it (every item up to it is committed), or -1."""
        self._marks_stream = stream
        return session_schema.replay_mark(self._resumed_meta, stream)

    @property
    def marked(self) -> int:
        """The newest ``mark`` whose items before it are all committed, or -1."""
        return self._marked

    @property
    def progress(self) -> int:
        """A count that moves while the writer works (items, SQLite steps): a stalled writer's stands still."""
        return self._progress

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
        return session_schema.file_bytes(self.path)

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

    def _resume_from(self, connection: sqlite3.Connection) -> list[dict[str, Any]]:
        """Take over what the file's previous writer counted (``reopen``); returns the file's segments so far."""
        meta = {str(k): str(v) for k, v in connection.execute("SELECT key, value FROM meta")}
        self._resumed_meta = meta
        if meta.get("format") != session_schema.FORMAT_NAME or meta.get("schema_major") != str(SCHEMA_VERSION[0]):
            raise ValueError(f"it is not a session of schema {SCHEMA_VERSION[0]}.x (format {meta.get('format')!r}, "
                             f"schema {meta.get('schema_version')!r}); record into a new file")
        for row in connection.execute("SELECT agent_id, first_seq, last_seq, messages, records, first_recv_s, "
                                      "last_recv_s FROM sequences"):
            self._sequences[str(row[0])] = list(row[1:])
            self._committed[str(row[0])] = int(row[2])  # the collector drops these when they are sent again
        recorded = transit.load(connection)
        self._transit.resume(recorded)
        self._transit_written |= set(recorded)
        for name in session_schema.COUNTERS:
            self._counts[name] = session_schema.meta_int(meta, name)
        self._dropped_records = session_schema.meta_int(meta, "recorder_dropped_records")
        self._write_errors = session_schema.meta_int(meta, "write_errors")
        self._last_write_error = meta.get("last_write_error") or None
        rejected = session_schema.meta_json(meta, "rejected", {})
        self._rejected.update({str(k): v for k, v in rejected.items() if isinstance(v, int)})
        self._run_ids = {str(run_id) for run_id in session_schema.meta_json(meta, "run_ids", [])}
        self._run_ids_written = set(self._run_ids)
        self._rejections_queued = int(connection.execute("SELECT COUNT(*) FROM rejections").fetchone()[0])
        segments: list[dict[str, Any]] = session_schema.meta_json(meta, "segments", [])
        return segments or [{"started_s": float(meta["created_s"]) if "created_s" in meta else None}]

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
            self._unstored_gaps["missing_before_join" if gap.kind == JOINED_LATE else "missing_messages"] += gap.missing

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
        self._put((what, payload, ts_s, cost))
        if queued + cost >= FLUSH_BYTES:
            self._wake.set()
        return True

    def _put(self, item: tuple[str, Any, float, int]) -> None:
        token, self.mark_next = self.mark_next, None  # one extend (a C call): the writer takes both or neither
        self._queue.extend((item,) if token is None else (item, ("mark", token, 0.0, 0)))

    # ---- Run lifecycle (GUI thread) ------------------------------------------------------------------------------

    def note_launch(self, run_id: str, state: str, exit_code: int | None, ts_s: float, detail: str = "") -> None:
        """Record how a run the window launched ended (stopped / failed / finished): agents cannot say it."""
        self._put(("launch", (run_id, state, exit_code, ts_s, detail), ts_s, 0))
        self._wake.set()

    def on_attempt(self, run_id: str, note: AttemptNote) -> None:
        """Record a restart supervisor's word on an attempt of a run (collector thread; ``IngestSink`` hook)."""
        self._put(("attempt", (run_id, note.attempt, note.event, note.ts_s, note.reason, note.exit_code, note.detail),
                   note.ts_s, 0))
        self._wake.set()

    def note_event(self, agent_id: str, event: Event) -> None:
        """Record an event the app observed about an agent's run (a hang): stored as if that agent had sent it, so
        it belongs to the agent's run, without touching the agent's message counts and sequence numbers."""
        self._put(("event", (agent_id, event), event.ts_s, 0))
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
        newest_mark = max((item[1] for item in items if item[0] == "mark"), default=None)
        try:
            self._write_items(connection, items, newest_mark)
        finally:
            # Released only now: until written, the items are still in memory (the budget bounds both together).
            self._dequeued_bytes += sum(item[3] for item in items)
            self._in_flight_records = 0
            self._marked = self._marked if newest_mark is None else newest_mark

    def _on_progress(self) -> int:
        """SQLite's progress handler (every ``_PROGRESS_OPS`` VM steps): ``close`` sees a long write move."""
        self._progress += 1
        return 0

    def _write_items(self, connection: sqlite3.Connection, items: list[tuple[str, Any, float, int]],
                     newest_mark: int | None) -> None:
        rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in FIELDS}
        tables: dict[str, list[tuple[Any, ...]]] = {"gaps": [], "rejections": [], "launches": [], "attempts": []}
        counts = self._counts
        touched: set[str] = set()
        for what, payload, ts, _ in items:
            self._progress += 1
            if what == "batch":
                self._batch_rows(payload, ts, rows)
                touched.add(payload.agent_id)
            elif what == "launch":
                tables["launches"].append(payload)
            elif what == "attempt":
                tables["attempts"].append(payload)
            elif what == "event":
                agent_id, event = payload
                rows["event"].append(self._converters["event"](agent_id, ts, event))
            elif what == "gap":
                late = payload.kind == JOINED_LATE
                tables["gaps"].append((payload.agent_id, payload.expected_seq, payload.got_seq, payload.missing, ts,
                                       payload.kind))
                counts["joined_late" if late else "gaps"] += 1
                counts["missing_before_join" if late else "missing_messages"] += payload.missing
            elif what == "rejection":  # a "mark" is only counted when its batch of items is done
                tables["rejections"].append((payload.reason, payload.detail, ts, payload.size_bytes))
        tables["sequences"] = [(agent_id, *self._sequences[agent_id]) for agent_id in touched]
        if newest_mark is not None and self._marks_stream is not None:  # what a process continuing it may skip
            tables["meta"] = [(session_schema.REPLAY_MARK, json.dumps([self._marks_stream, newest_mark]))]
        self._transit_due |= touched
        # every 2 s, and at once for an agent's first messages: a process that replaces a crashed one registers
        # the agents of a running run from their row (clock offset), so no rank waits for its next Hello
        if time.monotonic() >= self._transit_next or not touched <= self._transit_written:
            tables["transit"] = self._transit_rows()
        records = sum(len(r) for r in rows.values())
        try:
            with session_schema.transaction(connection):
                self._insert(connection, rows, tables, row_by_row=False)
            failed = 0
        except _WRITE_ERRORS as exc:
            # One bad row (or a full disk) must not cost the batch, let alone the session: retry row by row, keep
            # what can be written, count and report the rest.
            total = records + sum(len(t) for t in tables.values())
            self._write_failed(exc, 0, f"writing a batch of {total} rows; retrying row by row")
            counted = self._write_errors
            try:
                with session_schema.transaction(connection):
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
        statements = [(kind, session_schema.insert_statement(kind), kind_rows) for kind, kind_rows in rows.items()]
        statements += [(name, session_schema.INSERTS[name], table_rows) for name, table_rows in tables.items()]
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
        connection.executemany(session_schema.INSERTS["meta"], self._meta_counters())
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
            *((name, str(counts[name] + unstored.get(name, 0))) for name in session_schema.COUNTERS),
            ("rejected", rejected),
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
        self._transit_written |= self._transit_due
        self._transit_due = set()
        self._transit_next = time.monotonic() + TRANSIT_WRITE_S
        return rows

    def _finish(self, connection: sqlite3.Connection) -> None:
        """Indexes are built once at the end: maintaining them per insert costs ~10x (shared ENVIRONMENT.md)."""
        started = time.monotonic()
        with session_schema.transaction(connection):
            connection.executemany(session_schema.INSERTS["transit"], self._transit_rows())
            for statement in session_schema.INDEXES:
                connection.execute(statement)
            connection.executemany(session_schema.INSERTS["meta"],
                                   [*self._meta_counters(), ("closed_s", repr(time.time()))])
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        log.debug("indexes built in %.2f s", time.monotonic() - started)


def _records_in(items: list[tuple[str, Any, float, int]]) -> int:
    """Records held by queued writer items (batches; gaps, rejections and launch notes hold none)."""
    return sum(len(payload.records) for what, payload, _, _ in items if what == "batch")
