"""Continuing a session after its ingest process was killed: the recorder reopens the file as a new segment and
carries its counters and sequences on; a collector told what the file holds drops what agents send again."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load


def _hello(agent_id: str) -> Hello:
    return Hello("run-r", agent_id, "h", 1, 0, 0, 1, None, [0], "pytorch", "ddp", None, [], "0.1.0", "1.0", 1.0,
                 2.0, 3.0)


def _batch(agent_id: str, seq: int) -> wire.Batch:
    return wire.Batch(agent_id, seq, 1.0, (1, 0), [Step(0, seq, 1.0, 2.0, 1.0)])


def _wait(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


KILLED_WRITER = """
import sys, time
from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.sink import Rejection
hello = Hello("run-r", "a", "h", 1, 0, 0, 1, None, [0], "pytorch", "ddp", None, [], "0.1.0", "1.0", 1.0, 2.0, 3.0)
recorder = Recorder(sys.argv[1]).start()
recorder.on_batch(wire.Batch("a", 0, 1.0, (1, 0), [hello, Step(0, 0, 1.0, 2.0, 1.0)]), 5.0)
for seq in range(1, 10):
    recorder.on_batch(wire.Batch("a", seq, 1.0, (1, 0), [Step(0, seq, 1.0, 2.0, 1.0)]), 5.0 + seq)
recorder.on_rejection(Rejection("type", "bad", 6.0, 9))
while recorder.committed_seqs().get("a") != 9:
    time.sleep(0.01)
print("committed", flush=True)
time.sleep(60)
"""


def _killed_recording(path: Path) -> None:
    """A recording whose writer was SIGKILLed after committing seqs 0..9 of agent a (no indexes, no closed_s)."""
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "committed\n"
    finally:
        writer.kill()
        writer.wait(10)


def test_a_reopened_file_continues_as_a_new_segment_with_its_counters_and_sequences(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _killed_recording(path)
    with sqlite3.connect(path) as connection:  # an agent's row comes with its first commit, not 2 s later: a
        before = dict(connection.execute("SELECT agent_id, messages FROM transit"))  # new process registers it
    assert set(before) == {"a"} and 1 <= before["a"] <= 10
    second = Recorder(path).reopen("the ingest process ended (killed by SIGKILL)")
    assert second.committed_seqs() == {"a": 9}  # what a collector acknowledges and drops when sent again
    for seq in range(10, 15):
        second.on_batch(_batch("a", seq), 20.0 + seq)
    second.on_batch(wire.Batch("b", 0, 1.0, (1, 0), [_hello("b")]), 40.0)
    second.close()
    with sqlite3.connect(path) as connection:
        sequences = {row[0]: row[1:] for row in connection.execute(
            "SELECT agent_id, first_seq, last_seq, messages, records, first_recv_s, last_recv_s FROM sequences")}
        meta = dict(connection.execute("SELECT key, value FROM meta"))
        after = dict(connection.execute("SELECT agent_id, messages FROM transit"))
    assert after == {"a": before["a"] + 5, "b": 1}  # the transit figures run on from the file's, too
    # merged, not overwritten: a's first seq, first receipt and message count run on from the first segment
    assert sequences["a"] == (0, 14, 15, 16, 5.0, 34.0) and sequences["b"][:3] == (0, 0, 1)
    assert meta["messages"] == "16" and meta["records"] == "17" and json.loads(meta["rejected"]) == {"type": 1}
    assert json.loads(meta["run_ids"]) == ["run-r"] and meta["agents"] == "2" and "closed_s" in meta
    segments = json.loads(meta["segments"])
    assert len(segments) == 2 and segments[0]["started_s"] == float(meta["created_s"])
    assert segments[1]["reason"] == "the ingest process ended (killed by SIGKILL)"
    data = load(path)
    assert sorted(data.steps["step"].tolist()) == list(range(15)) and data.counters["gaps"] == 0


def test_reopening_refuses_what_is_not_a_session_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Recorder(tmp_path / "none.db").reopen("crash")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    with pytest.raises(ValueError, match="not a session of schema"):
        Recorder(other).reopen("crash")


def test_a_collector_continuing_a_recording_drops_what_it_holds_and_sees_no_gap(
        tmp_path: Path, push: Callable[[str], zmq.Socket]) -> None:
    path = tmp_path / "s.db"
    _killed_recording(path)
    recorder = Recorder(path).reopen("crash")
    collector = Collector("tcp://127.0.0.1:0", [recorder])
    collector.continue_from(recorder.committed_seqs())
    collector.start()
    try:
        sock = push(collector.endpoint)
        for seq in range(7, 13):  # an agent sends again from its oldest unacknowledged message (7: 7..9 committed)
            sock.send(wire.encode("a", seq, time.time(), [Step(0, seq, 1.0, 2.0, 1.0)]))
        _wait(lambda: collector.counters.messages + collector.counters.duplicates >= 6)
        _wait(lambda: recorder.committed_seqs().get("a") == 12)
        counters = collector.counters
        assert (counters.duplicates, counters.messages, counters.gaps, counters.joined_late) == (3, 3, 0, 0)
    finally:
        collector.close()
        recorder.close()
    data = load(path)
    assert sorted(data.steps["step"].tolist()) == list(range(13))
    assert data.counters["gaps"] == 0 and data.counters["joined_late"] == []


def test_a_file_of_an_older_minor_version_gets_the_fields_added_since(tmp_path: Path) -> None:
    """Schema 1.4 appended ``Hello.job_id``: a 1.3 file (no such column) reopened by this version takes Hellos that
    carry it; what the file held reads it as None."""
    path = tmp_path / "old.db"
    first = Recorder(path).start()
    first.on_batch(wire.Batch("a0", 0, 1.0, (1, 3), [_hello("a0")]), 1.0)
    first.close()
    with sqlite3.connect(path) as connection:
        connection.execute('ALTER TABLE "hello" DROP COLUMN "job_id"')  # what a 1.3 recorder wrote
    newer = _hello("a1")
    newer.job_id = "4100"
    again = Recorder(path).reopen("ingest process restarted")
    again.on_batch(wire.Batch("a1", 0, 1.0, (1, 4), [newer]), 1.0)
    again.close()
    assert again.write_errors == 0
    assert {hello.agent_id: hello.job_id for hello in load(path).agents} == {"a0": None, "a1": "4100"}
