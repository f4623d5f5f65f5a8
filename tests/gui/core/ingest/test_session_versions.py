"""A session file of an older minor schema (before the heartbeat record) still opens, with no heartbeats."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Heartbeat, Hello
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import SessionFileError, load


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


def test_columns_read_in_bulk_equal_the_careful_path_and_text_in_a_number_column_falls_back(tmp_path: Path) -> None:
    import numpy as np

    from ringscope.agent.schema import Step
    from ringscope.gui.core.ingest import session_reader
    from ringscope.gui.core.session_data import columns_from_rows

    path = tmp_path / "s.db"
    recorder = Recorder(path).start()
    steps = [Step(r, k, 1.0 + k, 1.1 + k, 0.1, None if k % 3 else 0.01, 0.05, None, None, 32 if k % 2 else None)
             for k in range(50) for r in range(2)]
    recorder.on_batch(wire.Batch("a", 0, 1.9995, (1, 2), steps), 2.0)
    recorder.close()
    con = sqlite3.connect(path)
    careful = columns_from_rows("step", [row[2:] for row in session_reader._select(con, "step")])
    bulk = load(path).steps
    for name, column in careful.items():
        assert np.array_equal(column, bulk[name], equal_nan=True) if column.dtype != object else \
            list(column) == list(bulk[name]), name
    con.execute("UPDATE step SET compute_s = 'oops' WHERE rowid = 1")  # a damaged row
    con.commit()
    con.close()
    assert len(load(path).steps["step"]) == 100  # read the careful way, not refused
