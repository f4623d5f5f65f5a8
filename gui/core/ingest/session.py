"""Session files: their SQLite layout (shared with the recorder) and reading them back as ``SessionData``.

Layout, derived from ``ringscope.agent.schema.FIELDS``: one table per record kind (named after the kind) with columns
``agent_id``, ``recv_s`` and the schema fields (list fields as JSON text); ``meta`` (key/value: format, schema
version, created, run ids, ringscope version, ingest counters, write errors), ``gaps`` (``kind`` "lost": skipped
sequence numbers; "joined_late": what an agent sent before this recorder's collector heard from it), ``sequences``
(per agent: first and last sequence number, messages, records) and ``rejections``.

What it must never do: modify a session file, or let a bad file surface as anything but ``SessionFileError`` with a
message a user can act on. Works on a file that is still being written (WAL) and on one whose writer was killed.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import FIELDS, KIND_SINCE, SCHEMA_VERSION, Event, EventKind, Hello
from ringscope.gui.core.analysis.runs import runs_of
from ringscope.gui.core.ingest import blocks, transit
from ringscope.gui.core.session_data import Columns, SessionData, columns_from_rows

FORMAT_NAME: Final[str] = "ringscope-session"
_SQLITE_MAGIC: Final[bytes] = b"SQLite format 3\x00"

INDEXES: Final[tuple[str, ...]] = (
    'CREATE INDEX IF NOT EXISTS "step_rank_step" ON "step"("rank", "step")',
    'CREATE INDEX IF NOT EXISTS "gpu_ts" ON "gpu"("ts_s")',
    'CREATE INDEX IF NOT EXISTS "host_ts" ON "host"("ts_s")',
)
"""Built by the recorder at close, never while recording."""

ENVELOPE_COLUMNS: Final[tuple[str, ...]] = ("agent_id", "recv_s")
"""Leading columns of every record table: who sent the message, when it arrived (``time.time()``)."""


class SessionFileError(ValueError):
    """A file that cannot be read as a Ringscope session; the message names the file and what is wrong."""


# ---- Layout (used by the recorder) -------------------------------------------------------------------------------


def stored_positions(kind: str) -> tuple[int, ...]:
    """Indices of a kind's schema fields that get their own column.

    A field named like an envelope column (``Hello.agent_id``) is stored once, in the envelope column: agents
    put the same id in both, and a table cannot have two columns of one name.
    """
    return tuple(i for i, spec in enumerate(FIELDS[kind]) if spec.name not in ENVELOPE_COLUMNS)


def create_statements() -> list[str]:
    """CREATE TABLE statements for a new session file."""
    statements = [
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE IF NOT EXISTS gaps (agent_id TEXT, expected_seq INTEGER, got_seq INTEGER, missing INTEGER, "
        "ts_s REAL, kind TEXT)",
        "CREATE TABLE IF NOT EXISTS sequences (agent_id TEXT PRIMARY KEY, first_seq INTEGER, last_seq INTEGER, "
        "messages INTEGER, records INTEGER, first_recv_s REAL, last_recv_s REAL)",
        "CREATE TABLE IF NOT EXISTS rejections (reason TEXT, detail TEXT, ts_s REAL, size_bytes INTEGER)",
        # how runs started from the window's launcher ended (stopped / failed / finished, exit code): the agents
        # cannot say it themselves
        "CREATE TABLE IF NOT EXISTS launches (run_id TEXT, state TEXT, exit_code INTEGER, ts_s REAL, detail TEXT)",
    ]
    for kind, specs in FIELDS.items():
        columns = ", ".join(f'"{specs[i].name}" {specs[i].sql_type}' for i in stored_positions(kind))
        statements.append(f'CREATE TABLE IF NOT EXISTS "{kind}" (agent_id TEXT, recv_s REAL, {columns})')
    statements.append(blocks.CREATE)
    statements.append(transit.CREATE)
    return statements


def insert_statement(kind: str) -> str:
    """INSERT statement for one record kind's table (agent_id, recv_s, then fields in schema order)."""
    count = len(stored_positions(kind)) + len(ENVELOPE_COLUMNS)
    return f'INSERT INTO "{kind}" VALUES ({", ".join("?" * count)})'


# ---- Public API --------------------------------------------------------------------------------------------------


def load(path: str | Path, *, columnar: bool = True) -> SessionData:
    """Read a whole session file as columns. Raises ``SessionFileError`` for anything that is not one.

    ``columnar=False`` ignores the step table's columnar copies (``blocks``) and reads its rows.
    """
    path = Path(path)
    with _open(path) as connection:
        meta = _meta(connection, path)
        try:
            events, event_agents = _events(connection)
            data = SessionData(
                agents=_agents(connection),
                steps=_columns(connection, "step", use_blocks=columnar),
                gpu=_columns(connection, "gpu"),
                host=_columns(connection, "host"),
                health=_columns(connection, "health"),
                events=events,
                event_agents=event_agents,
                counters=_counters(connection, meta),
                source=str(path),
            )
        except sqlite3.DatabaseError as exc:
            raise _damaged(path, exc) from None
    data.counters["meta"] = meta
    transit.align_clocks(data, transit.clock_offsets(data.counters.get("transit") or {}))
    return data


def summarize(path: str | Path) -> dict[str, Any]:
    """What ``ringscope info`` prints: run ids, ranks, steps per rank, time span, losses, events, agents, size."""
    path = Path(path)
    data = load(path)
    steps = data.steps
    ranks = steps["rank"]
    per_rank: dict[str, int] = {}
    if len(ranks):
        values, counts = np.unique(ranks[~np.isnan(ranks)].astype(np.int64), return_counts=True)
        per_rank = {str(int(r)): int(c) for r, c in zip(values, counts, strict=True)}
    times = np.concatenate([steps["start_s"], steps["end_s"], data.gpu["ts_s"], data.host["ts_s"]])
    times = times[~np.isnan(times)]
    meta = data.counters["meta"]
    counters = {k: v for k, v in data.counters.items() if k != "meta"}
    return {
        "path": str(path),
        "file_bytes": _file_bytes(path),
        "schema_version": meta.get("schema_version"),
        "ringscope_version": meta.get("ringscope_version"),
        "complete": "closed_s" in meta,
        "run_ids": sorted({h.run_id for h in data.agents} | set(json.loads(meta.get("run_ids", "[]")))),
        "runs": [run.to_json() for run in runs_of(data)],
        "hangs": _hangs(data),
        "ranks": data.ranks,
        "world_size": data.world_size,
        "steps_per_rank": per_rank,
        "steps_total": len(ranks),
        "time_span": {
            "start_s": float(times.min()) if len(times) else None,
            "end_s": float(times.max()) if len(times) else None,
            "duration_s": float(times.max() - times.min()) if len(times) else 0.0,
        },
        "gaps": counters.get("gaps", 0),
        "missing_messages": counters.get("missing_messages", 0),
        "joined_late": counters.get("joined_late", []),
        "missing_before_join": counters.get("missing_before_join", 0),
        "dropped_by_agents": counters.get("dropped_by_agents", 0),
        "recorder_dropped_records": counters.get("recorder_dropped_records", 0),
        "write_errors": counters.get("write_errors", 0),
        "last_write_error": counters.get("last_write_error"),
        "sequences": counters.get("sequences", {}),
        "rejected": counters.get("rejected", {}),
        "events": dict(Counter(e.event for e in data.events)),
        "agents": [
            {"agent_id": h.agent_id, "host": h.host, "pid": h.pid, "ranks": h.ranks, "framework": h.framework,
             "strategy": h.strategy, "backend": h.backend, "run_id": h.run_id}
            for h in data.agents
        ],
    }


# ---- Reading -----------------------------------------------------------------------------------------------------


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    if not path.exists():
        raise SessionFileError(f"{path}: no such file; give the path of a session recorded by 'ringscope record'")
    if path.is_dir():
        raise SessionFileError(f"{path} is a directory, not a session file")
    with path.open("rb") as handle:
        head = handle.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise SessionFileError(f"{path} is not a Ringscope session: not an SQLite file (starts with {head[:8]!r})")
    # Read-only: never checkpoint or otherwise change a file another process may still be recording.
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise _damaged(path, exc) from None
    try:
        yield connection
    finally:
        connection.close()


def _damaged(path: Path, exc: Exception) -> SessionFileError:
    return SessionFileError(
        f"{path} cannot be read as a session ({exc}); the file may be truncated or damaged: "
        "use the original file, or re-record the session"
    )


def _meta(connection: sqlite3.Connection, path: Path) -> dict[str, str]:
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise SessionFileError(f"{path} is an SQLite file but not a Ringscope session (no 'meta' table)")
        meta = {str(k): str(v) for k, v in connection.execute("SELECT key, value FROM meta")}
    except sqlite3.DatabaseError as exc:
        raise _damaged(path, exc) from None
    if meta.get("format") != FORMAT_NAME:
        raise SessionFileError(f"{path} is an SQLite file but not a Ringscope session (format={meta.get('format')!r})")
    version = meta.get("schema_version", "")
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise SessionFileError(f"{path}: unreadable schema version {version!r}") from None
    if major != SCHEMA_VERSION[0]:
        newer = "a newer" if major > SCHEMA_VERSION[0] else "an older"
        raise SessionFileError(
            f"{path} was recorded with {newer} Ringscope (schema {version}); this one reads schema "
            f"{SCHEMA_VERSION[0]}.x: open it with a matching Ringscope version"
        )
    tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    file_version = (major, _minor(version))
    # a kind added by a later minor version (KIND_SINCE) is simply absent from older files: no rows, not damage
    missing = [kind for kind in FIELDS if kind not in tables and KIND_SINCE.get(kind, (major, 0)) <= file_version]
    if missing:
        raise SessionFileError(f"{path} is missing the table(s) {', '.join(missing)}; the file is damaged")
    return meta


def _hangs(data: SessionData) -> list[dict[str, Any]]:
    """The hang events the app recorded (a run stopped completing steps), with the run they belong to."""
    run_of = {h.agent_id: h.run_id for h in data.agents}
    return [{"run_id": run_of.get(agent, ""), "ts_s": event.ts_s, "rank": event.rank, "step": event.step,
             "stalled_s": event.duration_s, "text": event.text}
            for event, agent in zip(data.events, data.event_agents, strict=False) if event.event == EventKind.HANG]


def _minor(version: str) -> int:
    try:
        return int(version.split(".")[1])
    except (IndexError, ValueError):
        return 0


def _select(connection: sqlite3.Connection, kind: str) -> list[tuple[Any, ...]]:
    """Rows of a kind's table as (agent_id, recv_s, fields...), tolerating tables of an older minor version."""
    present = {row[1] for row in connection.execute(f'PRAGMA table_info("{kind}")')}
    if not present:
        return []  # a kind this file's (older) schema did not have
    columns = ", ".join(f'"{spec.name}"' if spec.name in present else "NULL" for spec in FIELDS[kind])
    # a field stored in an envelope column (Hello.agent_id) is selected from there: present covers it
    return connection.execute(f'SELECT agent_id, recv_s, {columns} FROM "{kind}" ORDER BY rowid').fetchall()


_MISSING: Final[float] = -1.7976931348623157e308
"""What SQL puts in place of NULL in numeric columns so that a whole table converts to float64 in one call."""


def _columns(connection: sqlite3.Connection, kind: str, *, use_blocks: bool = True) -> Columns:
    """A kind's table as columns: steps from their columnar blocks when these cover every row (``blocks``), else
    numeric fields in one query converted by numpy in one call (a 1-hour, 256-rank session has ~2 M step rows:
    per-value Python conversion took most of the load time)."""
    if kind == "step" and use_blocks:
        from_blocks = blocks.load_blocks(connection)
        if from_blocks is not None:
            return from_blocks
    present = {row[1] for row in connection.execute(f'PRAGMA table_info("{kind}")')}
    if not present:
        return {**columns_from_rows(kind, []), "agent_id": np.array([], dtype=object),
                "recv_s": np.array([], dtype=np.float64)}
    specs = FIELDS[kind]
    numeric = [spec.name for spec in specs if spec.sql_type in ("REAL", "INTEGER")]
    other = [spec.name for spec in specs if spec.sql_type not in ("REAL", "INTEGER")]
    numbers = ", ".join(f'IFNULL("{name}", {_MISSING!r})' if name in present else repr(_MISSING)
                        for name in ["recv_s", *numeric])
    try:
        values = np.array(connection.execute(f'SELECT {numbers} FROM "{kind}" ORDER BY rowid').fetchall(),
                          dtype=np.float64).reshape(-1, len(numeric) + 1)
    except (TypeError, ValueError):  # text where a number belongs (a damaged file): the careful row-by-row path
        rows = _select(connection, kind)
        careful = columns_from_rows(kind, [row[2:] for row in rows])
        careful["agent_id"] = np.array([row[0] for row in rows], dtype=object)
        careful["recv_s"] = np.array([row[1] for row in rows], dtype=np.float64)
        return careful
    values[values == _MISSING] = np.nan
    texts = ", ".join(f'"{name}"' if name in present else "NULL" for name in ["agent_id", *other])
    text_rows = connection.execute(f'SELECT {texts} FROM "{kind}" ORDER BY rowid').fetchall()
    columns: Columns = {}
    for spec in specs:
        if spec.name in numeric:
            columns[spec.name] = np.ascontiguousarray(values[:, 1 + numeric.index(spec.name)])
        else:
            index = 1 + other.index(spec.name)
            columns[spec.name] = _object_column([row[index] for row in text_rows])
    columns["agent_id"] = _object_column([row[0] for row in text_rows])
    columns["recv_s"] = np.ascontiguousarray(values[:, 0])
    return columns


def _object_column(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _agents(connection: sqlite3.Connection) -> list[Hello]:
    """One identity per agent: the last Hello it sent (they are re-sent periodically)."""
    latest: dict[str, Hello] = {}
    list_positions = [i for i, spec in enumerate(FIELDS["hello"]) if list in spec.types]
    for row in _select(connection, "hello"):
        values = list(row[2:])
        for i in list_positions:
            values[i] = json.loads(values[i]) if values[i] is not None else []
        hello = Hello(*values)
        latest[hello.agent_id] = hello
    return list(latest.values())


def _events(connection: sqlite3.Connection) -> tuple[list[Event], list[str]]:
    """Every event in time order, and the agent that sent each."""
    rows = sorted(((Event(*row[2:]), str(row[0])) for row in _select(connection, "event")), key=lambda p: p[0].ts_s)
    return [event for event, _ in rows], [agent for _, agent in rows]


def _counters(connection: sqlite3.Connection, meta: dict[str, str]) -> dict[str, Any]:
    """Ingest counters as committed with the rows (a killed recorder's file has them up to its last commit)."""
    def meta_int(key: str) -> int:
        try:
            return int(meta.get(key, "0"))
        except ValueError:
            return 0

    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    losses = _losses(connection, tables)
    gaps = max(losses["gaps"], meta_int("gaps"))  # meta also counts gap rows a full recorder queue did not store
    missing = max(losses["missing_messages"], meta_int("missing_messages"))
    try:
        rejected = {str(k): int(v) for k, v in json.loads(meta.get("rejected", "{}")).items()}
    except (ValueError, AttributeError):
        rejected = {}
    for reason, count in connection.execute("SELECT reason, COUNT(*) FROM rejections GROUP BY reason"):
        rejected[reason] = max(rejected.get(reason, 0), int(count))
    # An agent's Health counters are cumulative: its last one says how much it dropped in total.
    drops: dict[str, int] = {}
    for agent_id, dropped in connection.execute(
        'SELECT agent_id, dropped_records FROM "health" ORDER BY rowid'
    ):
        drops[str(agent_id)] = int(dropped)
    launches: dict[str, dict[str, Any]] = {}
    if "launches" in tables:  # files of older versions have none
        for run_id, state, code, ts_s, detail in connection.execute(
                "SELECT run_id, state, exit_code, ts_s, detail FROM launches ORDER BY rowid"):
            launches[str(run_id)] = {"state": state, "exit_code": code, "ts_s": ts_s, "detail": detail}
    return {
        "launches": launches,
        "messages": meta_int("messages"),
        "records": meta_int("records"),
        "gaps": int(gaps),
        "missing_messages": int(missing),
        "joined_late": losses["joined_late"],
        "missing_before_join": max(losses["missing_before_join"], meta_int("missing_before_join")),
        "write_errors": meta_int("write_errors"),
        "last_write_error": meta.get("last_write_error") or None,
        "sequences": {str(agent_id): {"first_seq": first, "last_seq": last, "messages": messages}
                      for agent_id, first, last, messages in connection.execute(
                          "SELECT agent_id, first_seq, last_seq, messages FROM sequences ORDER BY rowid")}
        if "sequences" in tables else {},
        "transit": transit.load(connection),
        "rejected": rejected,
        "rejected_total": sum(rejected.values()),
        "skipped_records": meta_int("skipped_records"),
        "recorder_dropped_records": meta_int("recorder_dropped_records"),
        "agents": len({row[0] for row in connection.execute('SELECT DISTINCT agent_id FROM "hello"')} | set(drops)),
        "dropped_by_agent": drops,
        "dropped_by_agents": sum(drops.values()),
    }


def _losses(connection: sqlite3.Connection, tables: set[str]) -> dict[str, Any]:
    """Gaps inside the session, and the agents that joined late (with what this session never saw of them).

    TOTAL, not SUM: a hostile sender can claim sequence numbers near 2^63, and SUM would overflow.
    """
    columns = {row[1] for row in connection.execute("PRAGMA table_info(gaps)")}
    kind = "COALESCE(kind, 'lost')" if "kind" in columns else "'lost'"  # files before 1.1 have only losses
    gaps, missing = connection.execute(
        f"SELECT COUNT(*), TOTAL(missing) FROM gaps WHERE {kind} != 'joined_late'").fetchone()
    late = [{"agent_id": str(agent_id), "messages_not_seen": int(got_seq), "first_seq_seen": int(got_seq)}
            for agent_id, got_seq in connection.execute(
                f"SELECT agent_id, got_seq FROM gaps WHERE {kind} = 'joined_late' ORDER BY rowid")]
    return {"gaps": int(gaps), "missing_messages": int(missing), "joined_late": late,
            "missing_before_join": sum(entry["messages_not_seen"] for entry in late)}


def _file_bytes(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            total += candidate.stat().st_size
    return total
