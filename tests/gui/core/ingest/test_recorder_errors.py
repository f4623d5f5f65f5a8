"""The recorder survives rows it cannot write: a bad row costs that row only (counted, reported), a full database
costs the batches written while it is full, and recording continues either way. Real SQLite files; the bad batches
are handed to the recorder directly, as if validation had missed them."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.ingest.sink import JOINED_LATE, Gap, Rejection
from ringscope.gui.core.report.model import ingest_quality_rows
from tests.agent import hostile


def _batch(agent_id: str, seq: int, records: list) -> wire.Batch:
    return wire.Batch(agent_id, seq, 1.0, (1, 1), records)


def _wait(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_rows_that_cannot_be_stored_are_dropped_alone_and_recording_continues(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "bad-rows.db").start()
    deep = hostile.nested(5000)
    bad = [
        Step(0, 2**64 - 1, 1.0, 2.0, 1.0),  # SQLite cannot bind it: OverflowError
        hostile.hello("bin-device", devices=[{"k": b"\x00"}]),  # json cannot dump bytes: TypeError
        hostile.hello("bytes-key", devices=[{b"k": 1}]),  # TypeError
        hostile.hello("deep-ranks", ranks=[deep]),  # RecursionError in json.dumps
    ]
    good_before = [Step(0, i, 1.0, 2.0, 1.0) for i in range(100)]
    recorder.on_batch(_batch("good", 0, good_before[:50] + bad[:1] + good_before[50:]), 2.0)
    for seq, record in enumerate(bad[1:], start=1):
        recorder.on_batch(_batch("bad", seq, [record, Step(1, seq, 1.0, 2.0, 1.0)]), 2.0)
    assert _wait(lambda: recorder.write_errors == 4)
    # the writer is still alive: later batches keep arriving in the file
    recorder.on_batch(_batch("good", 1, [Step(0, i, 1.0, 2.0, 1.0) for i in range(100, 200)]), 3.0)
    assert _wait(lambda: recorder.rows_written >= 203)
    recorder.close()
    assert recorder.write_errors == 4
    assert recorder.last_write_error is not None and "Error" in recorder.last_write_error
    data = load(recorder.path)
    steps = sorted(int(s) for s, r in zip(data.steps["step"], data.steps["rank"], strict=True) if r == 0)
    assert steps == list(range(200))  # every good row of the batch that held the bad one
    assert sorted(int(s) for s, r in zip(data.steps["step"], data.steps["rank"], strict=True) if r == 1) == [1, 2, 3]
    summary = summarize(recorder.path)
    assert summary["write_errors"] == 4 and summary["last_write_error"] == recorder.last_write_error
    assert dict(ingest_quality_rows(data.counters))["Write errors"].startswith("4 rows not written")
    assert summary["complete"]


def test_a_full_database_costs_only_what_is_written_while_it_is_full(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "full.db").start()
    recorder.on_batch(_batch("a", 0, [Step(0, i, 1.0, 2.0, 1.0) for i in range(1000)]), 1.0)
    assert _wait(lambda: recorder.rows_written == 1000)
    connection = recorder._connection  # what a full disk looks like to SQLite: SQLITE_FULL on the next pages
    assert connection is not None
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count={pages + 1}")
    recorder.on_batch(_batch("a", 1, [Step(0, i, 1.0, 2.0, 1.0, loss=0.5) for i in range(1000, 21_000)]), 2.0)
    assert _wait(lambda: recorder.write_errors >= 20_000)
    assert "full" in (recorder.last_write_error or "")
    connection.execute("PRAGMA max_page_count=1073741823")  # the disk has room again
    recorder.on_batch(_batch("a", 2, [Step(0, i, 1.0, 2.0, 1.0) for i in range(21_000, 22_000)]), 3.0)
    assert _wait(lambda: recorder.rows_written == 2000)
    recorder.close()
    steps = load(recorder.path).steps["step"].astype(int).tolist()
    assert sorted(steps) == list(range(1000)) + list(range(21_000, 22_000))


def test_gaps_joined_late_and_sequences_are_stored_and_summarized(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "seq.db").start()
    recorder.on_joined_late(Gap("late", 0, 40, 1.0, JOINED_LATE))
    recorder.on_batch(_batch("late", 40, [hostile.hello("late", run_id="r")]), 1.0)
    recorder.on_batch(_batch("late", 41, [Step(0, 1, 1.0, 2.0, 1.0)]), 1.1)
    recorder.on_gap(Gap("late", 42, 45, 1.2))
    recorder.on_batch(_batch("late", 45, [Step(0, 2, 1.0, 2.0, 1.0)]), 1.2)
    recorder.on_batch(_batch("first", 0, [Step(1, 1, 1.0, 2.0, 1.0)]), 1.3)
    recorder.on_rejection(Rejection("range", "x" * 100_000, 1.0, 10))
    recorder.close()
    summary = summarize(recorder.path)
    assert summary["gaps"] == 1 and summary["missing_messages"] == 3
    assert summary["joined_late"] == [{"agent_id": "late", "messages_not_seen": 40, "first_seq_seen": 40}]
    assert summary["missing_before_join"] == 40
    assert summary["sequences"] == {"late": {"first_seq": 40, "last_seq": 45, "messages": 3},
                                    "first": {"first_seq": 0, "last_seq": 0, "messages": 1}}
    assert summary["rejected"] == {"range": 1}
    rows = dict(ingest_quality_rows(load(recorder.path).counters))  # the reports' data-quality section
    assert "1 agent(s); 40 earlier message(s)" in rows["Joined late"] and "Write errors" not in rows
    connection = sqlite3.connect(recorder.path)
    try:
        (stored,) = connection.execute("SELECT LENGTH(detail) FROM rejections").fetchone()
    finally:
        connection.close()
    assert stored <= 1000  # a hostile text is stored truncated


def test_run_ids_are_written_when_they_change_not_on_every_commit(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "runs.db").start()
    run_id = "r" * 200
    recorder.on_batch(_batch("a", 0, [hostile.hello("a", run_id=run_id)]), 1.0)
    assert _wait(lambda: recorder.rows_written == 1)
    connection = sqlite3.connect(recorder.path)
    try:
        def run_ids_changes() -> int:
            return int(connection.execute(
                "SELECT COUNT(*) FROM meta WHERE key='run_ids' AND value LIKE '%rrrr%'").fetchone()[0])
        assert _wait(lambda: run_ids_changes() == 1)
        # the meta row is rewritten only when the set changes: its rowid stays while other counters move on
        (rowid,) = connection.execute("SELECT rowid FROM meta WHERE key='run_ids'").fetchone()
        for seq in range(1, 6):
            recorder.on_batch(_batch("a", seq, [Step(0, seq, 1.0, 2.0, 1.0)]), 1.0)
            time.sleep(0.25)
        assert connection.execute("SELECT rowid FROM meta WHERE key='run_ids'").fetchone() == (rowid,)
        (updated,) = connection.execute("SELECT rowid FROM meta WHERE key='updated_s'").fetchone()
        assert updated > rowid  # rewritten by every commit since
    finally:
        connection.close()
        recorder.close()
