"""The session file's schema (``ringscope.gui.core.ingest.session_schema``): one table per record kind plus the
fixed tables, rows as the recorder inserts them, and ``meta`` values read back whatever a damaged file holds."""

from __future__ import annotations

import json
import sqlite3

from ringscope.agent.schema import FIELDS, Hello, Step
from ringscope.gui.core.ingest.session_schema import (
    ENVELOPE_COLUMNS,
    INSERTS,
    TABLES,
    create_statements,
    insert_statement,
    meta_int,
    meta_json,
    row_converter,
    stored_positions,
)


def test_every_table_is_created_and_every_insert_fits_its_table() -> None:
    connection = sqlite3.connect(":memory:")
    for statement in create_statements():
        connection.execute(statement)
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == set(TABLES) | set(FIELDS)
    for name, statement in INSERTS.items():
        width = statement.count("?")
        assert width == len(connection.execute(f'PRAGMA table_info("{name}")').fetchall()), name
    for kind in FIELDS:
        columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{kind}")')]
        assert columns[:2] == list(ENVELOPE_COLUMNS) and insert_statement(kind).count("?") == len(columns)


def test_a_record_becomes_its_row_with_lists_as_json_and_the_envelope_stored_once() -> None:
    hello = Hello("run", "agent-1", "host", 10, 0, 0, 2, 0, [0], "pytorch", "ddp", "gloo", [], "0.1.0", "1.0", 1.0,
                  2.0, 3.0)
    row = row_converter("hello")("agent-1", 5.0, hello)
    assert row[:2] == ("agent-1", 5.0) and len(row) == 2 + len(stored_positions("hello"))
    assert "[0]" in row and "agent_id" not in [FIELDS["hello"][i].name for i in stored_positions("hello")]
    assert row_converter("step")("a", 1.0, Step(0, 3, 1.0, 1.5, 0.5))[:4] == ("a", 1.0, 0, 3)


def test_meta_values_of_a_damaged_file_restart_instead_of_failing() -> None:
    meta = {"messages": "12", "gaps": "x", "run_ids": json.dumps(["a"]), "rejected": "[1]", "segments": "{"}
    assert meta_int(meta, "messages") == 12 and meta_int(meta, "gaps") == 0 and meta_int(meta, "absent") == 0
    assert meta_json(meta, "run_ids", []) == ["a"] and meta_json(meta, "rejected", {}) == {}
    assert meta_json(meta, "segments", []) == [] and meta_json(meta, "absent", {}) == {}
