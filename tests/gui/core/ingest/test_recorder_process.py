"""The recorder in a process of its own (``RecorderProcess``): real child processes, real SQLite files, real
signals. What the ingest process hands it is written once and only once, whatever happens to the child."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest.recorder_process import NICE, RecorderProcess
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.ingest.sink import Gap, Rejection
from tests.sinks import wait_for


def _hello(agent_id: str) -> Hello:
    return Hello("run-p", agent_id, "h", 1, 0, 0, 1, None, [0], "pytorch", "ddp", None, [], "0.1.0", "1.0", 1.0,
                 2.0, 3.0)


def _batch(agent_id: str, seq: int, *extra: Hello) -> wire.Batch:
    """A batch as the collector hands it on: decoded from its message, which it keeps (``raw``)."""
    return wire.decode(wire.encode(agent_id, seq, 1.0, [*extra, Step(0, seq, 1.0, 2.0, 1.0)]))


def _steps(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as connection:
        return [(str(a), int(s)) for a, s in connection.execute("SELECT agent_id, step FROM step")]


def test_a_recorder_process_writes_what_it_is_handed_and_reports_what_may_be_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = RecorderProcess(path, meta={"command": "test"}).start()
    assert recorder.pid is not None and recorder.pid != os.getpid()
    niceness = int(Path(f"/proc/{recorder.pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert niceness == min(19, os.nice(0) + NICE)  # it yields the cores to the window and the collector
    recorder.on_batch(_batch("a", 0, _hello("a")), 5.0)
    for seq in range(1, 500):
        recorder.on_batch(_batch("a", seq), 5.0 + seq / 100)
    recorder.on_gap(Gap("a", 500, 503, 12.0))
    recorder.on_rejection(Rejection("malformed", "not msgpack", 12.5, 7))
    recorder.note_launch("run-p", "stopped", 1, 13.0, "stopped from the window")
    wait_for(lambda: recorder.committed_seqs().get("a") == 499)  # the collector acknowledges this to the agent
    assert recorder.rows_written == 501  # 1 hello + 500 steps, as of the child's last report
    child = recorder.pid
    recorder.close()
    assert child is not None and not Path(f"/proc/{child}").exists()  # no writer left behind
    data = load(path)
    assert len(_steps(path)) == 500 and data.counters["gaps"] == 1 and data.counters["missing_messages"] == 3
    assert data.counters["rejected"] == {"malformed": 1}
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT state, detail FROM launches").fetchall() == [
            ("stopped", "stopped from the window")]
        meta = dict(connection.execute("SELECT key, value FROM meta"))
    assert meta["command"] == "test" and "closed_s" in meta
    assert recorder.write_errors == 0 and recorder.dropped_records == 0 and recorder.last_write_error is None


def test_a_killed_recorder_process_is_replaced_and_every_record_is_in_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = RecorderProcess(path).start()
    recorder.on_batch(_batch("a", 0, _hello("a")), 5.0)
    killed = []
    for seq in range(1, 3000):
        recorder.on_batch(_batch("a", seq), 5.0 + seq / 100)
        if seq in (700, 1900):  # twice, while it holds work it has not committed
            pid = recorder.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            # the new one caught up
            wait_for(lambda at=seq: recorder.pid not in killed and recorder.committed_seqs().get("a") == at)
    recorder.close()
    steps = _steps(path)
    assert len(steps) == 3000 and len(set(steps)) == 3000  # none lost, none twice
    assert recorder.rows_written == 3001 and recorder.write_errors == 0
    assert "replaced, nothing lost" in (recorder.last_write_error or "")
    segments = json.loads(dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))["segments"])
    assert len(segments) == 3 and "exit code -9" in segments[2]["reason"]


def _rows(path: Path, table: str) -> int:
    try:
        with sqlite3.connect(path, timeout=0.1) as connection:
            return int(connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:  # the writer holds the lock for a moment
        return -1


def test_a_gap_or_launch_note_committed_just_before_the_child_dies_is_in_the_file_once(tmp_path: Path) -> None:
    # The child reports what it committed every 0.1 s. Killed right after committing a gap and a launch note, before
    # reporting them, it leaves both in its parent's replay buffer: they are sent to the new child again, which must
    # see from the file that they are there already (batches are matched by sequence number; these have none).
    path = tmp_path / "s.db"
    recorder = RecorderProcess(path).start()
    recorder.on_batch(_batch("a", 0, _hello("a")), 5.0)
    kills = 4
    for round_ in range(kills):
        recorder.on_gap(Gap("a", 100 * round_, 100 * round_ + 3, 12.0 + round_))
        recorder.note_launch(f"run-{round_}", "stopped", 1, 13.0 + round_, "stopped from the window")
        pid = recorder.pid
        assert pid is not None
        deadline = time.monotonic() + 20
        while _rows(path, "launches") < round_ + 1:  # committed, as any reader of the file sees it
            assert time.monotonic() < deadline, "the child never committed the launch note"
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)  # within ~2 ms of the commit: before the child's next report, nearly always
        assert wait_for(lambda old=pid: recorder.pid not in (None, old))  # replaced
    recorder.close()
    assert _rows(path, "gaps") == kills and _rows(path, "launches") == kills  # none twice
    data = load(path)
    assert data.counters["gaps"] == kills and data.counters["missing_messages"] == 3 * kills
    with sqlite3.connect(path) as connection:
        assert [run for (run,) in connection.execute("SELECT run_id FROM launches ORDER BY rowid")] == [
            f"run-{i}" for i in range(kills)]
        segments = json.loads(dict(connection.execute("SELECT key, value FROM meta"))["segments"])
    assert len(segments) == 1 + kills and recorder.write_errors == 0


def test_a_sigterm_to_the_whole_group_leaves_the_recording_to_its_ingest_process(tmp_path: Path) -> None:
    """GNU timeout, job control and systemd signal every process; the ingest process closes the recorder after
    the window's orderly close, so the recorder must still be writing then."""
    path = tmp_path / "s.db"
    recorder = RecorderProcess(path).start()
    recorder.on_batch(_batch("a", 0, _hello("a")), 5.0)
    pid = recorder.pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.5)
    recorder.on_batch(_batch("a", 1), 6.0)
    recorder.note_launch("run-p", "stopped", 1, 7.0, "the window's last note")
    wait_for(lambda: recorder.committed_seqs().get("a") == 1)
    assert recorder.pid == pid  # the same child, not a replacement
    recorder.close()
    assert _steps(path) == [("a", 0), ("a", 1)]
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT detail FROM launches").fetchall() == [("the window's last note",)]


ORPHANING_PARENT = """
import os, sys, time
from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.ingest.recorder_process import NICE, RecorderProcess
messages = [wire.encode("a", seq, 1.0, [Step(0, seq * 500 + i, 1.0, 2.0, 1.0) for i in range(500)])
            for seq in range(300)]
recorder = RecorderProcess(sys.argv[1]).start()
print(recorder.pid, flush=True)
for message in messages:
    recorder.on_batch(wire.decode(message), 5.0)
while recorder.committed_seqs().get("a", -1) < 0:  # the child has them all and is writing: ~2 s of work left
    time.sleep(0.001)
os._exit(0)  # as a crash would: no close
"""


def _message(seq: int) -> wire.Batch:
    return wire.decode(wire.encode("a", seq, 1.0, [Step(0, seq * 500 + i, 1.0, 2.0, 1.0) for i in range(500)]))


def test_a_recorder_whose_ingest_process_died_finishes_the_file_before_another_may_continue_it(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    parent = subprocess.run([sys.executable, "-c", ORPHANING_PARENT, str(path)], capture_output=True, text=True,
                            timeout=60, check=True)
    orphan = int(parent.stdout.split()[0])
    # At once, as the window's supervisor does: the replacement's writer waits for the orphan's lock, so it
    # continues from everything the orphan wrote (what the dead ingest process never acknowledged, its agents send
    # again to the new one).
    successor = RecorderProcess(path).reopen("the ingest process ended unexpectedly")
    orphan_gone = not Path(f"/proc/{orphan}").exists() or Path(f"/proc/{orphan}/stat").read_text().split()[2] == "Z"
    written = successor.committed_seqs().get("a", -1)
    successor.on_batch(_message(written + 1), 9.0)
    successor.close()
    assert orphan_gone and written == 299  # the orphan wrote all it had received
    steps = _steps(path)
    assert sorted(steps) == [("a", step) for step in range((written + 2) * 500)]  # none twice, none missing
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert len(json.loads(meta["segments"])) == 2 and "closed_s" in meta
    assert successor.write_errors == 0


def test_a_file_another_recorder_process_still_writes_is_continued_only_once_it_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = RecorderProcess(path).start()
    first.on_batch(_batch("a", 0, _hello("a")), 5.0)
    wait_for(lambda: first.committed_seqs().get("a") == 0)
    started = time.monotonic()
    with pytest.raises(ValueError, match="still being written by another recorder process"):
        RecorderProcess(path, lock_wait_s=0.5).reopen("a second window on the same file")
    assert time.monotonic() - started >= 0.5
    first.on_batch(_batch("a", 1), 6.0)  # the refused one changed nothing
    closer = threading.Timer(1.0, first.close)
    closer.start()
    started = time.monotonic()
    second = RecorderProcess(path).reopen("the first one closed")  # waits for the first one's close
    waited = time.monotonic() - started
    closer.join()
    assert waited >= 0.9 and second.committed_seqs() == {"a": 1}
    second.on_batch(_batch("a", 2), 7.0)
    second.close()
    assert _steps(path) == [("a", 0), ("a", 1), ("a", 2)]


def test_a_file_that_exists_or_is_not_a_session_is_refused_with_the_reason(tmp_path: Path) -> None:
    existing = tmp_path / "taken.db"
    existing.write_bytes(b"")
    with pytest.raises(FileExistsError, match="already exists"):
        RecorderProcess(existing).start()
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match=r"cannot reopen session file .* for append"):
        RecorderProcess(other).reopen("test")
    assert not list(tmp_path.glob("*.lock")) and sorted(p.name for p in tmp_path.iterdir()) == ["other.db",
                                                                                                "taken.db"]
