"""The recorder writes exactly what it was given into tables derived from the schema."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from ringscope.agent import wire
from ringscope.agent.schema import FIELDS, Event, Hello, Step, schema_version_str
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.sink import Gap, Rejection


def _hello(agent_id: str) -> Hello:
    return Hello("run-7", agent_id, "h", 1, 0, 0, 2, None, [0, 1], "tensorflow", "mirrored", None,
                 [{"index": 0}], "0.1.0", "1.0", 1.0, 2.0, 3.0)


def test_every_record_gap_and_rejection_is_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = Recorder(path, meta={"note": "hi"}).start()
    recorder.on_batch(wire.Batch("a1", 0, 1.0, (1, 0), [_hello("a1")]), 5.0)
    for seq in range(1, 101):
        steps = [Step(r, seq, 1.0, 2.0, 1.0, comm_exposed_s=0.1 * r) for r in (0, 1)]
        recorder.on_batch(wire.Batch("a1", seq, 1.0, (1, 0), [*steps, Event(3.0, "epoch", epoch=seq)]), 6.0)
    recorder.on_gap(Gap("a1", 3, 5, 7.0))
    recorder.on_rejection(Rejection("type", "field rank must be int", 8.0, 99))
    recorder.close()
    assert recorder.rows_written == 1 + 300
    con = sqlite3.connect(path)
    try:
        assert con.execute('SELECT COUNT(*) FROM "step"').fetchone()[0] == 200
        assert con.execute('SELECT COUNT(*) FROM "event"').fetchone()[0] == 100
        columns = [row[1] for row in con.execute('PRAGMA table_info("step")')]
        assert columns == ["agent_id", "recv_s", *(s.name for s in FIELDS["step"])]
        hello = con.execute('SELECT agent_id, ranks, devices FROM "hello"').fetchone()
        assert hello[0] == "a1" and json.loads(hello[1]) == [0, 1] and json.loads(hello[2]) == [{"index": 0}]
        assert con.execute("SELECT agent_id, expected_seq, got_seq, missing FROM gaps").fetchall() == [("a1", 3, 5, 2)]
        assert con.execute("SELECT reason, size_bytes FROM rejections").fetchall() == [("type", 99)]
        meta = dict(con.execute("SELECT key, value FROM meta"))
        indexes = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        journal = con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()
    assert meta["format"] == "ringscope-session" and meta["schema_version"] == schema_version_str()
    assert meta["note"] == "hi"
    assert json.loads(meta["run_ids"]) == ["run-7"] and meta["messages"] == "101" and "closed_s" in meta
    assert json.loads(meta["rejected"]) == {"type": 1}
    assert "step_rank_step" in indexes and journal == "wal"


def test_no_secondary_index_while_recording_and_rows_committed_within_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    recorder = Recorder(path).start()
    try:
        recorder.on_batch(wire.Batch("a", 0, 1.0, (1, 0), [Step(0, 1, 1.0, 2.0, 1.0)]), 2.0)
        deadline = time.monotonic() + 10
        while recorder.rows_written < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        con = sqlite3.connect(path)
        try:
            assert con.execute('SELECT COUNT(*) FROM "step"').fetchone()[0] == 1
            assert con.execute("SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
                               ).fetchone()[0] == 0
        finally:
            con.close()
    finally:
        recorder.close()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "taken.db"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="already exists"):
        Recorder(path).start()
    assert path.read_bytes() == b"precious"


def test_a_full_queue_drops_and_counts_instead_of_blocking_the_collector(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "small.db", queue_capacity_bytes=40_000).start()  # about 2 batches of 50
    batches = 40
    started = time.perf_counter()
    for seq in range(batches):  # far faster than the writer's 200 ms flush: the queue overflows
        recorder.on_batch(wire.Batch("a", seq, 1.0, (1, 0), [Step(0, seq * 50 + i, 1.0, 2.0, 1.0)
                                                            for i in range(50)]), 2.0)
    handed_s = time.perf_counter() - started
    recorder.close()
    assert recorder.dropped_records > 0
    assert recorder.rows_written + recorder.dropped_records == batches * 50
    assert handed_s < 1.0
    con = sqlite3.connect(recorder.path)
    try:
        meta = dict(con.execute("SELECT key, value FROM meta"))
        assert int(meta["recorder_dropped_records"]) == recorder.dropped_records
        assert con.execute('SELECT COUNT(*) FROM "step"').fetchone()[0] == recorder.rows_written
    finally:
        con.close()


def test_close_waits_for_the_writer_while_it_makes_progress(tmp_path: Path) -> None:
    """A recorder far behind at close (8 192 ranks: hundreds of MB queued) writes until everything is in the file;
    the old close gave up after a fixed 10 s, and the process exited with rows unwritten and no error counted."""
    path = tmp_path / "behind.db"
    recorder = Recorder(path).start()
    recorder.on_batch(wire.Batch("a1", 0, 1.0, (1, 0), [_hello("a1")]), 5.0)
    for seq in range(1, 301):
        steps = [Step(r % 2, seq * 1000 + r, 1.0, 2.0, 1.0, comm_exposed_s=0.1) for r in range(1000)]
        recorder.on_batch(wire.Batch("a1", seq, 1.0, (1, 0), steps), 6.0)
    # 300 000 rows take ~2 s to write here; the longest stretch without progress (committing them) ~0.3 s
    recorder.close(timeout_s=1.0)
    assert recorder.rows_written == 1 + 300_000 and recorder.write_errors == 0
    con = sqlite3.connect(path)
    try:
        assert con.execute('SELECT COUNT(*) FROM "step"').fetchone()[0] == 300_000
    finally:
        con.close()


def test_a_writer_that_stops_making_progress_is_given_up_on_and_what_it_held_is_counted(tmp_path: Path) -> None:
    """A hung disk: another connection holds the file's write lock, so the writer waits inside SQLite (busy
    timeout) and moves no further; close gives up after its stall time and counts every record it did not write."""
    path = tmp_path / "locked.db"
    recorder = Recorder(path).start()
    recorder.on_batch(wire.Batch("a1", 0, 1.0, (1, 0), [_hello("a1")]), 5.0)
    deadline = time.monotonic() + 10
    while recorder.rows_written < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    blocker = sqlite3.connect(path, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # holds the write lock until rolled back
    try:
        for seq in range(1, 6):
            recorder.on_batch(wire.Batch("a1", seq, 1.0, (1, 0), [Step(0, seq, 1.0, 2.0, 1.0)] * 10), 6.0)
        started = time.monotonic()
        recorder.close(timeout_s=0.5)
        assert time.monotonic() - started < 5.0
        assert recorder.write_errors == 50 and "no progress" in (recorder.last_write_error or "")
    finally:
        blocker.rollback()
        blocker.close()
