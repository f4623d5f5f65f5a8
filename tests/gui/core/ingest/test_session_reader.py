"""Reading session files back: complete, still being written, and every kind of bad file."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import SCHEMA_VERSION, Event, Health, Hello, Step
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import SessionFileError, load
from ringscope.gui.core.ingest.sink import Gap, Rejection


def _hello(agent_id: str, rank: int) -> Hello:
    return Hello("run-1", agent_id, f"host{rank}", 10 + rank, rank, rank, 2, 0, [rank], "pytorch", "ddp", "gloo",
                 [], "0.1.0", "1.0", 1.0, 2.0, 3.0)


def _record(path: Path, *, close: bool = True) -> Recorder:
    recorder = Recorder(path).start()
    for rank in (0, 1):
        agent_id = f"a{rank}"
        records: list = [_hello(agent_id, rank)]
        records += [Step(rank, i, 10.0 + i, 10.9 + i, 0.9, comm_exposed_s=None if rank else 0.2) for i in range(50)]
        records += [Event(11.0, "checkpoint_saved", rank=rank), Health(12.0, 0, 100, 4 + rank, 50, 1, 0, 0)]
        recorder.on_batch(wire.Batch(agent_id, 0, 19.9995, (1, 0), records), 20.0)  # same clock: 0.5 ms on the way
    recorder.on_gap(Gap("a1", 1, 4, 21.0))
    recorder.on_rejection(Rejection("version", "schema 2.0", 22.0, 10))
    if close:
        recorder.close()
    return recorder


def test_load_returns_columns_agents_events_and_counters(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    data = load(path)
    assert data.ranks == [0, 1] and data.source == str(path)
    assert len(data.steps["rank"]) == 100 and data.steps["agent_id"][0] == "a0"
    assert np.isnan(data.steps_of(1)["comm_exposed_s"]).all()  # missing reading stays missing
    assert [h.agent_id for h in data.agents] == ["a0", "a1"] and data.agents[1].ranks == [1]
    assert [e.event for e in data.events] == ["checkpoint_saved"] * 2
    counters = data.counters
    assert counters["gaps"] == 1 and counters["missing_messages"] == 3
    assert counters["rejected"] == {"version": 1}
    assert counters["dropped_by_agent"] == {"a0": 4, "a1": 5} and counters["dropped_by_agents"] == 9


def test_a_file_still_being_written_can_be_read(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    recorder = _record(path, close=False)
    try:
        deadline = time.monotonic() + 10
        while recorder.rows_written < 104 and time.monotonic() < deadline:
            time.sleep(0.02)
        data = load(path)
        assert len(data.steps["rank"]) == 100
    finally:
        recorder.close()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SessionFileError, match="no such file"):
        load(tmp_path / "nope.db")


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    path.write_bytes(np.random.default_rng(3).bytes(5000))
    with pytest.raises(SessionFileError, match="not an SQLite file"):
        load(path)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    cut = tmp_path / "cut.db"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(SessionFileError, match="truncated or damaged"):
        load(cut)


def test_sqlite_file_that_is_not_a_session(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(SessionFileError, match="not a Ringscope session"):
        load(path)


def test_newer_major_schema(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (f"{SCHEMA_VERSION[0] + 1}.0",))
    con.commit()
    con.close()
    with pytest.raises(SessionFileError, match="newer Ringscope"):
        load(path)
