"""Reading session files back as ``SessionData``, by their schema (``session_schema``), on the collector's clock
(``clocks``).

What it must never do: modify a session file, or let a bad file surface as anything but ``SessionFileError`` with a
message a user can act on. Works on a file that is still being written (WAL) and on one whose writer was killed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import FIELDS, KIND_SINCE, SCHEMA_VERSION, Event, Hello
from ringscope.gui.core.ingest import blocks, transit
from ringscope.gui.core.ingest.clocks import align_clocks, clock_offsets
from ringscope.gui.core.ingest.session_schema import FORMAT_NAME, meta_int
from ringscope.gui.core.session_data import Columns, SessionData, columns_from_rows

_SQLITE_MAGIC: Final[bytes] = b"SQLite format 3\x00"


class SessionFileError(ValueError):
    """A file that cannot be read as a Ringscope session; the message names the file and what is wrong."""


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
    align_clocks(data, clock_offsets(data.counters.get("transit") or {}))
    return data


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
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    losses = _losses(connection, tables)
    gaps = max(losses["gaps"], meta_int(meta, "gaps"))  # meta also counts gap rows a full recorder queue did not store
    missing = max(losses["missing_messages"], meta_int(meta, "missing_messages"))
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
    attempts: dict[str, list[dict[str, Any]]] = {}
    if "attempts" in tables:  # files of older versions have none
        for run_id, number, event, ts_s, reason, code, detail in connection.execute(
                "SELECT run_id, attempt, event, ts_s, reason, exit_code, detail FROM attempts ORDER BY rowid"):
            attempts.setdefault(str(run_id), []).append({"attempt": number, "event": event, "ts_s": ts_s,
                                                         "reason": reason, "exit_code": code, "detail": detail})
    return {
        "launches": launches,
        "attempts": attempts,
        "messages": meta_int(meta, "messages"),
        "records": meta_int(meta, "records"),
        "gaps": int(gaps),
        "missing_messages": int(missing),
        "joined_late": losses["joined_late"],
        "missing_before_join": max(losses["missing_before_join"], meta_int(meta, "missing_before_join")),
        "write_errors": meta_int(meta, "write_errors"),
        "last_write_error": meta.get("last_write_error") or None,
        "sequences": {str(agent_id): {"first_seq": first, "last_seq": last, "messages": messages}
                      for agent_id, first, last, messages in connection.execute(
                          "SELECT agent_id, first_seq, last_seq, messages FROM sequences ORDER BY rowid")}
        if "sequences" in tables else {},
        "transit": transit.load(connection),
        "rejected": rejected,
        "rejected_total": sum(rejected.values()),
        "skipped_records": meta_int(meta, "skipped_records"),
        "recorder_dropped_records": meta_int(meta, "recorder_dropped_records"),
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
