"""The step table's columnar copies: written by the recorder with every batch, read back equal to the rows, and
never trusted when they do not cover every row (older files, batches written row by row, damaged blocks)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest import blocks
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.ingest.session_schema import BLOCKS_TABLE
from ringscope.gui.core.session_data import Columns, distinct


def _hello(agent_id: str, rank: int) -> Hello:
    return Hello("run-b", agent_id, "h", 1, rank, rank, 2, None, [rank], "pytorch", "ddp", "gloo", [], "0.1.0",
                 "1.0", 1.0, 2.0, 3.0)


def _record(path: Path, batches: int = 40) -> Recorder:
    """Two agents' steps with every kind of value a step row holds: floats, missing (None), large integers,
    negative numbers, booleans."""
    recorder = Recorder(path).start()
    for rank in (0, 1):
        recorder.on_batch(wire.Batch(f"agent-{rank}", 0, 1.0, (1, 0), [_hello(f"agent-{rank}", rank)]), 1.0)
    for seq in range(1, batches + 1):
        for rank in (0, 1):
            steps = [Step(rank, seq * 10 + i, 100.0 + seq + i * 0.01, 100.5 + seq + i * 0.01, 0.5,
                          data_wait_s=None if i % 3 else 0.01 * i, compute_s=0.2 + rank * 0.05,
                          comm_exposed_s=-0.0 if i == 0 else 0.1, samples=32, loss=None if rank else 1.5 - seq * 1e-3,
                          bucket_bytes=(1 << 40) + i if rank else None, first_batch=seq == 1 and i == 0,
                          epoch=seq // 10)
                     for i in range(10)]
            recorder.on_batch(wire.Batch(f"agent-{rank}", seq, 1.0, (1, 0), steps), 2.0 + seq)
    return recorder


def _assert_equal(a: Columns, b: Columns) -> None:
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        if a[name].dtype == object:
            assert a[name].tolist() == b[name].tolist(), name
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _blocks(path: Path) -> list[tuple[int, int, int]]:
    with sqlite3.connect(path) as con:
        return con.execute(f'SELECT first_rowid, last_rowid, n FROM "{BLOCKS_TABLE}" ORDER BY rowid').fetchall()


def test_a_recorded_file_loads_from_its_blocks_equal_to_its_rows(tmp_path: Path) -> None:
    recorder = _record(tmp_path / "s.db")
    recorder.close()
    written = _blocks(recorder.path)
    assert written and sum(n for _, _, n in written) == 800
    columnar, rows = load(recorder.path), load(recorder.path, columnar=False)
    _assert_equal(columnar.steps, rows.steps)
    assert len(columnar.steps["step"]) == 800
    assert np.isnan(columnar.steps["loss"][columnar.steps["rank"] == 1]).all()
    assert np.nanmax(columnar.steps["bucket_bytes"]) == float((1 << 40) + 9)
    assert columnar.steps["first_batch"].sum() == 2
    assert sorted(set(columnar.steps["agent_id"])) == ["agent-0", "agent-1"]


def test_a_file_being_recorded_loads_from_its_blocks(tmp_path: Path) -> None:
    recorder = _record(tmp_path / "live.db", batches=5)
    try:
        deadline = time.monotonic() + 10
        while recorder.rows_written < 102 and time.monotonic() < deadline:  # 2 hellos + 100 steps committed
            time.sleep(0.05)
        assert blocks.load_blocks(sqlite3.connect(f"file:{recorder.path}?mode=ro", uri=True)) is not None
        _assert_equal(load(recorder.path).steps, load(recorder.path, columnar=False).steps)
    finally:
        recorder.close()


def test_a_batch_written_row_by_row_makes_the_loader_read_the_rows(tmp_path: Path) -> None:
    recorder = _record(tmp_path / "mixed.db", batches=3)
    # SQLite cannot bind 2**64 - 1: the batch is retried row by row (the good rows kept) and gets no block
    bad = [Step(0, 2**64 - 1, 1.0, 2.0, 1.0), *[Step(0, 1000 + i, 1.0, 2.0, 1.0) for i in range(5)]]
    recorder.on_batch(wire.Batch("agent-0", 99, 1.0, (1, 0), bad), 9.0)
    recorder.on_batch(wire.Batch("agent-0", 100, 1.0, (1, 0), [Step(0, 2000, 1.0, 2.0, 1.0)]), 9.5)
    recorder.close()
    assert recorder.write_errors == 1
    with sqlite3.connect(f"file:{recorder.path}?mode=ro", uri=True) as con:
        assert blocks.load_blocks(con) is None
    data = load(recorder.path)
    _assert_equal(data.steps, load(recorder.path, columnar=False).steps)
    assert {1000, 1004, 2000} <= set(data.steps["step"].astype(int).tolist())


@pytest.mark.parametrize("damage", ["truncate", "layout", "delete_block", "no_table"])
def test_damaged_or_missing_blocks_fall_back_to_the_rows(tmp_path: Path, damage: str) -> None:
    recorder = _record(tmp_path / "d.db", batches=4)
    recorder.close()
    expected = load(recorder.path, columnar=False).steps
    with sqlite3.connect(recorder.path) as con:
        last = con.execute(f'SELECT MAX(rowid) FROM "{BLOCKS_TABLE}"').fetchone()[0]
        if damage == "truncate":
            con.execute(f'UPDATE "{BLOCKS_TABLE}" SET data = substr(data, 1, 40) WHERE rowid = {last}')
        elif damage == "layout":
            layout = '[["#agent","i4"],["nope","f8"]]'
            con.execute(f'UPDATE "{BLOCKS_TABLE}" SET layout = ? WHERE rowid = {last}', (layout,))
        elif damage == "delete_block":
            con.execute(f'DELETE FROM "{BLOCKS_TABLE}" WHERE rowid = {last}')
        else:
            con.execute(f'DROP TABLE "{BLOCKS_TABLE}"')  # a file recorded before blocks existed
    with sqlite3.connect(f"file:{recorder.path}?mode=ro", uri=True) as con:
        assert blocks.load_blocks(con) is None
    _assert_equal(load(recorder.path).steps, expected)


def test_distinct_equals_numpy_unique() -> None:
    rng = np.random.default_rng(3)
    cases = [rng.integers(0, 300, 5000).astype(np.float64), np.array([3.0, np.nan, 1.0, np.nan]),
             np.array([-1.0, 2.0, 2.0]), np.array([0.5, 0.5, 2.0]), np.array([], dtype=np.float64),
             np.array([2.0**40, 1.0]), rng.integers(0, 9, 100)]
    for values in cases:
        np.testing.assert_array_equal(distinct(values), np.unique(values))
        assert distinct(values).dtype == np.unique(values).dtype
