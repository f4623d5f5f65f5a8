"""Records everything the collector accepts into one SQLite session file (an ``IngestSink``).

What it owns: the session file, one writer thread, and a bounded hand-off queue between the collector's thread
and the writer. Tables derive from ``agent.schema.FIELDS`` (see ``session_schema``): one per record kind with
``agent_id``, ``recv_s`` and the schema fields; ``meta`` (key/value), ``gaps`` and ``rejections``.

What it must never do: block the collector's thread (``on_batch`` is an append; when the queue is full the batch
is dropped and counted in ``meta.recorder_dropped_records``), build secondary indexes while recording (they are
built at ``close``), or lose what was handed to it before ``close`` returns.

Durability: WAL with ``synchronous=NORMAL``; every committed batch survives a SIGKILL of this process (shared
ENVIRONMENT.md), and the ingest counters are written in the same transaction as the rows they count.
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

from agent import wire
from agent.schema import FIELDS, SCHEMA_VERSION, Hello, Record, schema_version_str
from gui.core.ingest.session import FORMAT_NAME, INDEXES, create_statements, insert_statement, stored_positions
from gui.core.ingest.sink import Gap, Rejection

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S: Final[float] = 0.2
FLUSH_ROWS: Final[int] = 20_000
"""The writer commits every ``FLUSH_INTERVAL_S`` or as soon as this many records are waiting."""

QUEUE_CAPACITY_RECORDS: Final[int] = 2_000_000
"""Records the hand-off queue may hold (~10 s of 1024 ranks x 100 steps/s + samples) before batches are dropped."""

MAX_STORED_REJECTIONS: Final[int] = 10_000
"""Rejections stored with their text; beyond this only the counts per reason grow (a flood must not fill the disk)."""

RINGSCOPE_VERSION: Final[str] = "0.1.0"


class Recorder:
    """An ``IngestSink`` that writes a session file. ``start()`` before adding it to a collector; ``close()`` last.

    Args:
        path: the session file to create (an existing file is refused, so a session is never overwritten).
        meta: extra key/value pairs for the ``meta`` table (e.g. the command line that produced it).
        queue_capacity_records: records waiting for the writer beyond which batches are dropped (and counted).
    """

    def __init__(self, path: str | Path, *, meta: Mapping[str, str] | None = None,
                 queue_capacity_records: int = QUEUE_CAPACITY_RECORDS) -> None:
        self.path = Path(path)
        self._capacity = queue_capacity_records
        self._meta = {str(k): str(v) for k, v in (meta or {}).items()}
        # (kind of item, payload): "batch" (Batch, recv_s), "gap" Gap, "rejection" Rejection
        self._queue: deque[tuple[str, Any, float]] = deque()
        # Queue depth in records = enqueued - dequeued; each counter has a single writer thread, so no lock.
        self._enqueued_records = 0
        self._dequeued_records = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connection: sqlite3.Connection | None = None
        self._rows_written = 0
        self._dropped_records = 0
        self._counts: Counter[str] = Counter()  # messages, records, bytes, gaps, missing_messages
        self._rejected: Counter[str] = Counter()
        self._run_ids: set[str] = set()
        self._agents: set[str] = set()
        self._error: BaseException | None = None
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
        self._connection = connection
        self._thread = threading.Thread(target=self._run, name="ringscope-recorder", daemon=True)
        self._thread.start()
        return self

    @property
    def rows_written(self) -> int:
        """Record rows committed so far (all kinds)."""
        return self._rows_written

    @property
    def dropped_records(self) -> int:
        """Records dropped because the writer fell too far behind (0 in a healthy session)."""
        return self._dropped_records

    @property
    def file_bytes(self) -> int:
        """Size of the session on disk, including the write-ahead log."""
        total = 0
        for suffix in ("", "-wal"):
            candidate = self.path.with_name(self.path.name + suffix)
            if candidate.exists():
                total += candidate.stat().st_size
        return total

    def close(self, timeout_s: float = 10.0) -> None:
        """Write everything received so far, build indexes, and close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("recorder did not finish writing %s within %.1f s; the file holds what was committed",
                          self.path, timeout_s)
                return
        if self._error is not None:
            log.error("recorder stopped early on an error: %s", self._error)

    # ---- IngestSink (collector thread: appends only) -------------------------------------------------------------

    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        """Queue a batch for writing; drop (and count) it when the writer is hopelessly behind."""
        count = len(batch.records)
        queued = self._enqueued_records - self._dequeued_records
        if queued + count > self._capacity or self._closed:
            self._dropped_records += count
            return
        self._enqueued_records += count
        self._queue.append(("batch", batch, recv_s))
        if queued + count >= FLUSH_ROWS:
            self._wake.set()

    def on_gap(self, gap: Gap) -> None:
        """Queue a gap row."""
        self._queue.append(("gap", gap, gap.ts_s))

    def on_rejection(self, rejection: Rejection) -> None:
        """Queue a rejection row (counted always, stored up to ``MAX_STORED_REJECTIONS``)."""
        self._queue.append(("rejection", rejection, rejection.ts_s))

    # ---- Run lifecycle (GUI thread) ------------------------------------------------------------------------------

    def note_launch(self, run_id: str, state: str, exit_code: int | None, ts_s: float, detail: str = "") -> None:
        """Record how a run the window launched ended (stopped / failed / finished): agents cannot say it."""
        self._queue.append(("launch", (run_id, state, exit_code, ts_s, detail), ts_s))
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
                self._write_pending(connection)
                if stopping:
                    break
            self._finish(connection)
        except BaseException as exc:  # a full disk must not take the collector down; say so loudly
            self._error = exc
            log.exception("recorder failed while writing %s; later data is not recorded", self.path)
        finally:
            connection.close()

    def _write_pending(self, connection: sqlite3.Connection) -> None:
        queue = self._queue
        items = [queue.popleft() for _ in range(len(queue))]
        if not items:
            return
        rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in FIELDS}
        gaps: list[tuple[Any, ...]] = []
        rejections: list[tuple[Any, ...]] = []
        launches: list[tuple[Any, ...]] = []
        counts = self._counts
        taken = 0
        for what, payload, ts in items:
            if what == "batch":
                taken += self._batch_rows(payload, ts, rows)
            elif what == "launch":
                launches.append(payload)
            elif what == "gap":
                gaps.append((payload.agent_id, payload.expected_seq, payload.got_seq, payload.missing, ts))
                counts["gaps"] += 1
                counts["missing_messages"] += payload.missing
            else:
                self._rejected[payload.reason] += 1
                if counts["stored_rejections"] < MAX_STORED_REJECTIONS:
                    counts["stored_rejections"] += 1
                    rejections.append((payload.reason, payload.detail, ts, payload.size_bytes))
        self._dequeued_records += taken
        written = sum(len(r) for r in rows.values())
        with _transaction(connection):
            for kind, kind_rows in rows.items():
                if kind_rows:
                    connection.executemany(insert_statement(kind), kind_rows)
            if gaps:
                connection.executemany(
                    "INSERT INTO gaps(agent_id, expected_seq, got_seq, missing, ts_s) VALUES (?, ?, ?, ?, ?)", gaps)
            if launches:
                connection.executemany(
                    "INSERT INTO launches(run_id, state, exit_code, ts_s, detail) VALUES (?, ?, ?, ?, ?)", launches)
            if rejections:
                connection.executemany(
                    "INSERT INTO rejections(reason, detail, ts_s, size_bytes) VALUES (?, ?, ?, ?)", rejections)
            connection.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", self._meta_counters())
        self._rows_written += written

    def _batch_rows(self, batch: wire.Batch, recv_s: float, rows: dict[str, list[tuple[Any, ...]]]) -> int:
        agent_id = batch.agent_id
        converters = self._converters
        for record in batch.records:
            kind = record.KIND
            rows[kind].append(converters[kind](agent_id, recv_s, record))
            if kind == "hello":
                assert isinstance(record, Hello)
                self._run_ids.add(record.run_id)
        counts = self._counts
        counts["messages"] += 1
        counts["records"] += len(batch.records)
        counts["skipped_records"] += batch.skipped
        self._agents.add(agent_id)
        return len(batch.records)

    def _meta_counters(self) -> list[tuple[str, str]]:
        counts = self._counts
        return [
            ("messages", str(counts["messages"])),
            ("records", str(counts["records"])),
            ("gaps", str(counts["gaps"])),
            ("missing_messages", str(counts["missing_messages"])),
            ("rejected", json.dumps(dict(self._rejected), sort_keys=True)),
            ("skipped_records", str(counts["skipped_records"])),
            ("recorder_dropped_records", str(self._dropped_records)),
            ("run_ids", json.dumps(sorted(self._run_ids))),
            ("agents", str(len(self._agents))),
            ("updated_s", repr(time.time())),
        ]

    def _finish(self, connection: sqlite3.Connection) -> None:
        """Indexes are built once at the end: maintaining them per insert costs ~10x (shared ENVIRONMENT.md)."""
        started = time.monotonic()
        with _transaction(connection):
            for statement in INDEXES:
                connection.execute(statement)
            connection.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                   [*self._meta_counters(), ("closed_s", repr(time.time()))])
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        log.debug("indexes built in %.2f s", time.monotonic() - started)


# ---- Helpers -----------------------------------------------------------------------------------------------------


@contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN ... COMMIT (ROLLBACK on error) on an autocommit connection."""
    connection.execute("BEGIN")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


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
