"""A session file of an older minor schema (before the heartbeat record) still opens, with no heartbeats."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agent import wire
from agent.schema import Heartbeat, Hello
from gui.core.ingest.recorder import Recorder
from gui.core.ingest.session import SessionFileError, load


def _file(path: Path) -> None:
    recorder = Recorder(path).start()
    hello = Hello("run", "a", "h", 1, 0, 0, 1, 0, [0], "pytorch", "ddp", None, [], "0.1.0", "1.2", 1.0, 0.0, 1.0)
    recorder.on_batch(wire.Batch("a", 0, 1.0, (1, 2), [hello, Heartbeat(2.0, 0, "compute", 1.5, 3)]), 2.0)
    recorder.close()


def test_heartbeats_are_recorded_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _file(path)
    con = sqlite3.connect(path)
    assert con.execute('SELECT rank, phase, step FROM "heartbeat"').fetchall() == [(0, "compute", 3)]
    con.close()
    assert load(path).agents[0].run_id == "run"


def test_a_file_of_schema_1_1_has_no_heartbeat_table_and_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _file(path)
    con = sqlite3.connect(path)
    con.execute('DROP TABLE "heartbeat"')
    con.execute("UPDATE meta SET value = '1.1' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    assert load(path).agents[0].agent_id == "a"
    con = sqlite3.connect(path)
    con.execute('DROP TABLE "health"')  # a kind every 1.x file has: that one is damage
    con.commit()
    con.close()
    with pytest.raises(SessionFileError, match="missing the table"):
        load(path)
