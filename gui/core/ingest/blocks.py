"""Columnar copies of the step table, so a long session loads in a fraction of a second.

A 1-hour, 256-rank recording holds ~1.8 M step rows. Reading them back through SQLite builds one Python tuple per
row (~10 s here); the recorder therefore also writes every committed batch of step rows as one **block**: one row of
``step_blocks`` holding the batch's columns as packed numpy arrays, in the same transaction as the rows themselves.
Loading is then ``np.frombuffer`` and a concatenation.

The rows stay the source of truth (users query them with SQL; old files have no blocks). ``load_blocks`` uses the
blocks only when they cover every step row — their rowid ranges follow one another without a gap from the table's
first rowid to its last (rows are only ever appended, with consecutive rowids, in the transaction that writes their
block) — and returns None otherwise (a file of an older version, a batch written row by row after an error, a
damaged block), so the caller reads the rows. Not detected: rows deleted by hand with SQL (no count is taken: counting
~2 M rows costs more than the whole columnar load).

Block layout: ``layout`` is JSON ``[[name, code], ...]`` in storage order, code ``"f8"`` (float64), ``"i4"`` (int32,
for integer columns without missing values that fit) or ``"nan"`` (every value missing: nothing stored);
``agents`` is the JSON list of the block's distinct agent ids and the first stored column, ``"#agent"`` (``"i4"``),
indexes it. Numeric values are what the row path gives: float64, NaN for NULL. The table and its INSERT are
declared with the file's other tables in ``session_schema``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import FIELDS
from ringscope.gui.core.ingest.session_schema import BLOCKS_TABLE, INSERTS

NUMERIC_NAMES: Final[tuple[str, ...]] = ("recv_s", *(spec.name for spec in FIELDS["step"]))
"""The numeric columns of a step row as inserted: ``recv_s`` then every step field (all numeric)."""
_INTEGER: Final[frozenset[str]] = frozenset(spec.name for spec in FIELDS["step"] if spec.sql_type == "INTEGER")
_AGENT: Final[str] = "#agent"
_INT32_MAX: Final[float] = float(np.iinfo(np.int32).max)
_ALL: Final[frozenset[str]] = frozenset((_AGENT, *NUMERIC_NAMES))


def encode(rows: Sequence[tuple[Any, ...]]) -> tuple[str, str, bytes] | None:
    """``(layout, agents, data)`` of step rows as inserted (agent_id, recv_s, fields...); None if a value is not a
    number (validation makes that impossible; the rows are then stored without a block and read the slow way)."""
    if not rows or len(rows[0]) != 1 + len(NUMERIC_NAMES):
        return None
    columns = list(zip(*rows, strict=True))
    agents = list(dict.fromkeys(columns[0]))
    code_of = {agent: i for i, agent in enumerate(agents)}
    layout: list[list[str]] = [[_AGENT, "i4"]]
    parts = [np.fromiter((code_of[a] for a in columns[0]), dtype=np.int32, count=len(rows)).tobytes()]
    try:
        for name, values in zip(NUMERIC_NAMES, columns[1:], strict=True):
            array = np.array(values, dtype=np.float64)  # None -> NaN, bool -> 0/1
            missing = np.isnan(array)
            if missing.all():
                layout.append([name, "nan"])
            elif (name in _INTEGER and not missing.any() and np.abs(array).max() <= _INT32_MAX
                  and np.array_equal(array, np.round(array))):
                layout.append([name, "i4"])
                parts.append(array.astype(np.int32).tobytes())
            else:
                layout.append([name, "f8"])
                parts.append(array.tobytes())
    except (TypeError, ValueError):
        return None
    return json.dumps(layout, separators=(",", ":")), json.dumps(agents, separators=(",", ":")), b"".join(parts)


def write(connection: sqlite3.Connection, rows: Sequence[tuple[Any, ...]], first_rowid: int) -> bool:
    """Insert the block of ``rows``, which were just inserted with rowids ``first_rowid``... in order."""
    encoded = encode(rows)
    if encoded is None:
        return False
    connection.execute(INSERTS[BLOCKS_TABLE], (first_rowid, first_rowid + len(rows) - 1, len(rows), *encoded))
    return True


def load_blocks(connection: sqlite3.Connection) -> dict[str, np.ndarray] | None:
    """The step table's columns (``agent_id``, ``recv_s`` and every step field) from its blocks, or None when the
    blocks do not cover every row (see the module docstring)."""
    present = connection.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (BLOCKS_TABLE,))
    if present.fetchone() is None:
        return None
    # two queries: SQLite answers MIN(rowid) or MAX(rowid) alone from the b-tree's ends, both at once by a scan
    low = connection.execute('SELECT MIN(rowid) FROM "step"').fetchone()[0]
    high = connection.execute('SELECT MAX(rowid) FROM "step"').fetchone()[0]
    if low is None:
        return None
    # in insertion order (blocks are appended with their rows), which ``_covered`` checks: no sort of the blobs
    blocks = connection.execute(
        f'SELECT first_rowid, last_rowid, n, layout, agents, data FROM "{BLOCKS_TABLE}" ORDER BY rowid').fetchall()
    total = _covered(blocks, low, high)
    if total is None:
        return None
    agents: dict[str, int] = {}
    codes = np.empty(total, dtype=np.int64)
    columns = {name: np.empty(total, dtype=np.float64) for name in NUMERIC_NAMES}
    at = 0
    try:
        for _first, _last, n, layout_text, agents_text, data in blocks:
            remap = np.array([agents.setdefault(str(a), len(agents)) for a in json.loads(agents_text)],
                             dtype=np.int64)
            offset = 0
            seen: set[str] = set()
            for name, code in json.loads(layout_text):
                target = codes if name == _AGENT else columns[name]
                if code == "nan":
                    target[at:at + n] = np.nan
                    seen.add(name)
                    continue
                dtype = np.dtype(np.float64 if code == "f8" else np.int32)
                array = np.frombuffer(data, dtype=dtype, count=n, offset=offset)
                offset += n * dtype.itemsize
                target[at:at + n] = remap[array] if name == _AGENT else array
                seen.add(name)
            if offset != len(data) or seen != _ALL:
                return None
            at += n
    except (ValueError, TypeError, KeyError, IndexError):  # a damaged block: the rows are still there
        return None
    names = np.empty(len(agents), dtype=object)
    names[:] = list(agents)
    result: dict[str, np.ndarray] = {"agent_id": names[codes]}
    result.update(columns)
    return result


def _covered(blocks: list[tuple[Any, ...]], low: int, high: int) -> int | None:
    """How many rows the blocks hold if their rowid ranges follow one another without a gap from the table's first
    rowid to its last, each holding exactly its range; else None."""
    if not blocks or blocks[0][0] != low or blocks[-1][1] != high:
        return None
    total = 0
    expected = low
    for first, last, n, *_ in blocks:
        if not isinstance(n, int) or first != expected or last - first + 1 != n:
            return None
        expected = last + 1
        total += n
    return total
