"""The session file's schema: its tables, their CREATE and INSERT statements, the indexes, how a record becomes a row,
and the format name and schema version in ``meta``. The recorder (``recorder``) writes by it; the reader
(``session_reader``) reads by it.

Layout, derived from ``ringscope.agent.schema.FIELDS``: one table per record kind (named after the kind) with the
``ENVELOPE_COLUMNS`` ``agent_id`` and ``recv_s``, then the schema fields (list fields as JSON text). Beside them:
``meta`` (key/value: format, schema version, created, run ids, ringscope version, ingest counters, write errors,
segments), ``gaps`` (``kind`` "lost": skipped sequence numbers; "joined_late": what an agent sent before this
recorder's collector heard from it), ``sequences`` (per agent: first and last sequence number, messages, records),
``rejections``, ``launches`` (how runs started from the window ended), ``attempts`` (what a restart supervisor said
about each attempt of a run), ``transit`` (each agent's queueing-delay figures: ``transit``) and ``step_blocks``
(columnar copies of the step rows: ``blocks``).

What it must never do: read or write a file. A renamed, removed or retyped column is a major schema version
(``ringscope.agent.schema.SCHEMA_VERSION``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from ringscope.agent import wire
from ringscope.agent.schema import FIELDS, SCHEMA_VERSION, Record, schema_version_str

FORMAT_NAME: Final[str] = "ringscope-session"
"""``meta.format`` of every session file."""
REPLAY_MARK: Final[str] = "replay_mark"
"""``meta`` key: ``[stream, n]``, every item up to ``n`` that recorder-process parent ``stream`` sent is committed."""
RINGSCOPE_VERSION: Final[str] = "0.1.0"
"""``meta.ringscope_version``: the version of the recorder that created the file."""

ENVELOPE_COLUMNS: Final[tuple[str, ...]] = ("agent_id", "recv_s")
"""Leading columns of every record table: who sent the message, when it arrived (``time.time()``)."""

BLOCKS_TABLE: Final[str] = "step_blocks"

TABLES: Final[dict[str, str]] = {
    "meta": "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    "gaps": "CREATE TABLE IF NOT EXISTS gaps (agent_id TEXT, expected_seq INTEGER, got_seq INTEGER, missing INTEGER, "
            "ts_s REAL, kind TEXT)",
    "sequences": "CREATE TABLE IF NOT EXISTS sequences (agent_id TEXT PRIMARY KEY, first_seq INTEGER, last_seq "
                 "INTEGER, messages INTEGER, records INTEGER, first_recv_s REAL, last_recv_s REAL)",
    "rejections": "CREATE TABLE IF NOT EXISTS rejections (reason TEXT, detail TEXT, ts_s REAL, size_bytes INTEGER)",
    # how runs started from the window's launcher ended (stopped / failed / finished, exit code): the agents cannot
    # say it themselves
    "launches": "CREATE TABLE IF NOT EXISTS launches (run_id TEXT, state TEXT, exit_code INTEGER, ts_s REAL, "
                "detail TEXT)",
    # what a restart supervisor (ringscope run --restart, the window's restart policy) said about each attempt of a
    # run: started / ended, why it ended, its exit code
    "attempts": "CREATE TABLE IF NOT EXISTS attempts (run_id TEXT, attempt INTEGER, event TEXT, ts_s REAL, "
                "reason TEXT, exit_code INTEGER, detail TEXT)",
    "transit": "CREATE TABLE IF NOT EXISTS transit (agent_id TEXT PRIMARY KEY, messages INTEGER, min_transit_s REAL, "
               "queue_hist TEXT)",
    BLOCKS_TABLE: f'CREATE TABLE IF NOT EXISTS "{BLOCKS_TABLE}" (first_rowid INTEGER, last_rowid INTEGER, n INTEGER, '
                  "layout TEXT, agents TEXT, data BLOB)",
}
"""The tables beside the record kinds' (name -> CREATE statement)."""

INSERTS: Final[dict[str, str]] = {
    "gaps": "INSERT INTO gaps(agent_id, expected_seq, got_seq, missing, ts_s, kind) VALUES (?, ?, ?, ?, ?, ?)",
    "rejections": "INSERT INTO rejections(reason, detail, ts_s, size_bytes) VALUES (?, ?, ?, ?)",
    "launches": "INSERT INTO launches(run_id, state, exit_code, ts_s, detail) VALUES (?, ?, ?, ?, ?)",
    "attempts": "INSERT INTO attempts(run_id, attempt, event, ts_s, reason, exit_code, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
    # statistics, not records: an agent's row is replaced as its figures grow
    "transit": "INSERT OR REPLACE INTO transit(agent_id, messages, min_transit_s, queue_hist) VALUES (?, ?, ?, ?)",
    "sequences": "INSERT OR REPLACE INTO sequences(agent_id, first_seq, last_seq, messages, records, first_recv_s, "
                 "last_recv_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
    "meta": "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
    BLOCKS_TABLE: f'INSERT INTO "{BLOCKS_TABLE}" VALUES (?, ?, ?, ?, ?, ?)',
}
"""INSERT statements of the tables beside the record kinds' (``insert_statement`` gives a record kind's)."""

INDEXES: Final[tuple[str, ...]] = (
    'CREATE INDEX IF NOT EXISTS "step_rank_step" ON "step"("rank", "step")',
    'CREATE INDEX IF NOT EXISTS "gpu_ts" ON "gpu"("ts_s")',
    'CREATE INDEX IF NOT EXISTS "host_ts" ON "host"("ts_s")',
)
"""Built by the recorder at close, never while recording."""

COUNTERS: Final[tuple[str, ...]] = ("messages", "records", "gaps", "missing_messages", "joined_late",
                                    "missing_before_join", "skipped_records")
"""The ingest counters in ``meta`` (integers as text), written with the rows they count."""


def stored_positions(kind: str) -> tuple[int, ...]:
    """Indices of a kind's schema fields that get their own column.

    A field named like an envelope column (``Hello.agent_id``) is stored once, in the envelope column: agents
    put the same id in both, and a table cannot have two columns of one name.
    """
    return tuple(i for i, spec in enumerate(FIELDS[kind]) if spec.name not in ENVELOPE_COLUMNS)


def create_statements() -> list[str]:
    """CREATE TABLE statements for a new session file (every one ``IF NOT EXISTS``: a reopened file of an older
    minor version gets the tables it lacks, empty)."""
    statements = list(TABLES.values())
    for kind, specs in FIELDS.items():
        columns = ", ".join(f'"{specs[i].name}" {specs[i].sql_type}' for i in stored_positions(kind))
        statements.append(f'CREATE TABLE IF NOT EXISTS "{kind}" (agent_id TEXT, recv_s REAL, {columns})')
    return statements


def added_column_statements(connection: sqlite3.Connection) -> list[str]:
    """``ALTER TABLE ... ADD COLUMN`` for every field a later minor version appended that a file's tables lack (a
    file of schema 1.3 reopened by 1.4 gets ``hello.job_id``); the rows already there read it as NULL."""
    statements = []
    for kind, specs in FIELDS.items():
        present = {row[1] for row in connection.execute(f'PRAGMA table_info("{kind}")')}
        if present:
            statements += [f'ALTER TABLE "{kind}" ADD COLUMN "{specs[i].name}" {specs[i].sql_type}'
                           for i in stored_positions(kind) if specs[i].name not in present]
    return statements


def insert_statement(kind: str) -> str:
    """INSERT statement for one record kind's table (agent_id, recv_s, then fields in schema order)."""
    count = len(stored_positions(kind)) + len(ENVELOPE_COLUMNS)
    return f'INSERT INTO "{kind}" VALUES ({", ".join("?" * count)})'


def format_meta(created_s: float) -> dict[str, str]:
    """The ``meta`` rows of a new file that make it a session of this schema (the reader checks ``format`` and the
    major version)."""
    return {
        "format": FORMAT_NAME,
        "schema_version": schema_version_str(),
        "schema_major": str(SCHEMA_VERSION[0]),
        "created_s": repr(created_s),
        "ringscope_version": RINGSCOPE_VERSION,
        "run_ids": "[]",
    }


def meta_int(meta: Mapping[str, str], key: str) -> int:
    """A counter of ``meta`` (0 when absent or unreadable: a damaged counter restarts)."""
    try:
        return int(meta.get(key, "0"))
    except ValueError:
        return 0


def replay_mark(meta: Mapping[str, str], stream: str) -> int:
    """The item number of ``REPLAY_MARK`` if recorder-process parent ``stream`` wrote it, else -1."""
    mark = meta_json(meta, REPLAY_MARK, [])
    return mark[1] if len(mark) == 2 and mark[0] == stream and type(mark[1]) is int else -1


def meta_json(meta: Mapping[str, str], key: str, default: Any) -> Any:
    """A JSON value of ``meta`` (run ids, rejections, segments) if it has ``default``'s type, else ``default`` (a
    damaged value restarts)."""
    text = meta.get(key)
    try:
        value = json.loads(text) if text else default
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default


def file_bytes(path: Path) -> int:
    """Size of a session on disk: the file and its write-ahead log (``-wal``; WAL mode, see ``recorder``)."""
    total = 0
    for suffix in ("", "-wal"):
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            total += candidate.stat().st_size
    return total


def row_converter(kind: str) -> Callable[[str, float, Record], tuple[Any, ...]]:
    """A function making one table row (``insert_statement``'s values) from a record; list fields become JSON text."""
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


def connect_writer(path: Path) -> sqlite3.Connection:
    """An autocommit connection to ``path`` for a writer thread, in WAL mode with ``synchronous=NORMAL`` (every
    committed transaction survives a SIGKILL of the writing process: shared ENVIRONMENT.md)."""
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN ... COMMIT (ROLLBACK on error) on an autocommit connection."""
    connection.execute("BEGIN")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:  # SQLite rolls back by itself on some errors (disk full)
            connection.execute("ROLLBACK")
        raise
