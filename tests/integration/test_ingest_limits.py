"""Nothing lost, whatever arrives: a real `ringscope record` process under hostile traffic, floods, a full disk and a
SIGKILL-and-restart, with real agents streaming over real ZeroMQ sockets. Memory is measured on the recording
process itself (/proc/PID/status: VmHWM is its peak resident set)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ringscope import agent
from ringscope.agent import wire
from ringscope.agent.runtime import Agent
from ringscope.agent.schema import Event, GpuSample, Step
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.ingest.collector import MAX_AGENTS, MAX_RANKS, MAX_RUN_IDS
from ringscope.gui.core.ingest.session_reader import load
from tests.agent import hostile
from tests.ports import free_port

RSS_GROWTH_LIMIT_MB = 150
"""The bound asserted: the recorder's queue budget (64 MB in the flood test, whose messages fill it; the fuzz test's
small messages never do) + ZeroMQ's per-connection queue (RCVHWM 8 x a ~4 MB message) + decoding transients."""


class Recording:
    """One `ringscope record` process; its output goes to files (a full pipe must never block it)."""

    def __init__(self, tmp_path: Path, name: str, bind: str = "tcp://127.0.0.1:0",
                 preexec: Callable[[], None] | None = None, extra: tuple[str, ...] = ()) -> None:
        self.out = tmp_path / f"{name}.db"
        self.stdout_path = tmp_path / f"{name}.stdout"
        self.stderr_path = tmp_path / f"{name}.stderr"
        with self.stdout_path.open("w") as stdout, self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(self.out), "--bind", bind,
                 "--progress-s", "0", *extra], stdout=stdout, stderr=stderr, text=True, preexec_fn=preexec,
                env={**os.environ, "PYTHONPATH": os.getcwd()})
        deadline = time.monotonic() + 60
        while "listening on" not in self.stdout_path.read_text() and time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr_path.read_text()
            time.sleep(0.05)
        line = self.stdout_path.read_text()
        assert "listening on tcp://" in line, line + self.stderr_path.read_text()
        self.endpoint = line.split("listening on ")[1].split(",")[0]
        time.sleep(0.3)  # let the imports and the first allocations settle before the baseline
        self.baseline_kb = _status_kb(self.proc.pid, "VmRSS")

    def peak_growth_mb(self) -> float:
        return (_status_kb(self.proc.pid, "VmHWM") - self.baseline_kb) / 1024

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        return code, self.stderr_path.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def recordings(tmp_path: Path) -> Iterator[Callable[..., Recording]]:
    started: list[Recording] = []

    def start(name: str, **kwargs: object) -> Recording:
        recording = Recording(tmp_path, name, **kwargs)  # type: ignore[arg-type]
        started.append(recording)
        return recording

    yield start
    for recording in started:
        recording.kill()


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _query(path: Path, sql: str) -> list[tuple]:
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            return connection.execute(sql).fetchall()
        finally:
            connection.close()
    except sqlite3.Error:
        return []


def _steps_by_rank(path: Path) -> dict[int, int]:
    return {int(rank): int(count) for rank, count in _query(path, 'SELECT rank, COUNT(*) FROM "step" GROUP BY rank')}


def _last_step_by_agent(path: Path) -> dict[str, int]:
    return {str(a): int(s) for a, s in _query(path, 'SELECT agent_id, MAX(step) FROM "step" GROUP BY agent_id')}


def _count(path: Path, table: str) -> int:
    rows = _query(path, f'SELECT COUNT(*) FROM "{table}"')
    return int(rows[0][0]) if rows else 0


def _wait(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Streamer:
    """Real agents (agent.start: Publisher over ZeroMQ) stepping ranks in a background thread until stopped."""

    def __init__(self, endpoint: str, run_id: str, ranks: int, steps_per_s: float = 2000.0) -> None:
        self.agents: list[Agent] = [
            agent.start(framework="other", strategy="ddp", rank=rank, world_size=ranks, endpoint=endpoint,
                        run_id=run_id, sample_devices=False) for rank in range(ranks)]
        self.steps = 0
        self._period_s = 1.0 / steps_per_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for rank, telemetry in enumerate(self.agents):
                telemetry.step(rank, self.steps, now, now + 0.001, data_wait_s=0.0001)
            self.steps += 1
            time.sleep(self._period_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def close(self) -> None:
        self.stop()
        for telemetry in self.agents:
            telemetry.close(5.0)


# ---- Fuzz and floods ---------------------------------------------------------------------------------------------


def test_fuzz_100k_hostile_messages_with_real_agents_loses_nothing_valid_and_stays_bounded(recordings, push) -> None:
    started = time.monotonic()
    recording = recordings("fuzz")
    streamer = Streamer(recording.endpoint, "fuzz", ranks=2)
    try:
        assert _wait(lambda: len(_steps_by_rank(recording.out)) == 2, 30)  # both real agents are known first
        sock = push(recording.endpoint)
        sent: Counter[str] = Counter()
        for payload, reason in hostile.stream(100_000):
            sock.send(payload)
            sent[reason] += 1
        # Accepted but hostile: values that are cleaned, claims of huge ranges, and attempts to exhaust the caps.
        nan_gpu = [1.0, "h", 0, None, None, 0, float("nan"), float("inf")]
        sock.send(hostile.envelope([["gpu", nan_gpu]], agent_id="nan-reader"))
        sock.send(wire.encode("claims-late", 2**63 - 1, 1.0, [Step(0, 1, 1.0, 2.0, 1.0)]))
        rank_blocks = 20
        for block in range(rank_blocks):  # 20 x 4096 ranks: the session takes 65 536
            ranks = list(range(block * 4096, (block + 1) * 4096))
            sock.send(wire.encode(f"ranks-{block}", 0, 1.0, [hostile.hello(f"ranks-{block}", ranks=ranks)]))
        run_floods = 300
        for run in range(run_floods):
            sock.send(wire.encode(f"runs-{run}", 0, 1.0, [hostile.hello(f"runs-{run}", run_id=f"run-{run}")]))
        known_agents = 2 + 2 + MAX_RANKS // 4096 + (MAX_RUN_IDS - 1)
        agent_floods = 5000
        for index in range(agent_floods):
            sock.send(wire.encode(f"who-{index}", 0, 1.0, [Step(0, index, 1.0, 2.0, 1.0)]))
        time.sleep(1.0)  # the real agents keep streaming after the flood
    finally:
        streamer.close()
    expected = streamer.steps
    ids = {t.identity.agent_id for t in streamer.agents}
    assert _wait(lambda: all(_last_step_by_agent(recording.out).get(i, -1) == expected - 1 for i in ids), 60)
    peak_mb = recording.peak_growth_mb()
    code, err = recording.stop()
    assert code == 0, err
    summary = summarize(recording.out)
    data = load(recording.out)
    for rank in (0, 1):  # every valid record of the real agents is in the file
        steps = sorted(int(s) for s, r, a in zip(data.steps["step"], data.steps["rank"], data.steps["agent_id"],
                                                  strict=True) if r == rank and a in ids)
        assert steps == list(range(expected)), (rank, len(steps), expected)
    rejected = summary["rejected"]
    for reason, count in sent.items():
        assert rejected[reason] == count, (reason, rejected.get(reason), count)
    assert rejected["too_many_ranks"] == rank_blocks - MAX_RANKS // 4096
    assert rejected["too_many_runs"] == run_floods - (MAX_RUN_IDS - 1)
    assert rejected["too_many_agents"] == agent_floods - (MAX_AGENTS - known_agents)
    assert summary["joined_late"] == [{"agent_id": "claims-late", "messages_not_seen": 2**63 - 1,
                                       "first_seq_seen": 2**63 - 1}]
    gpu = data.gpu
    assert len(gpu["ts_s"]) == 1 and str(gpu["util_pct"][0]) == "nan"  # a non-finite reading stored as None
    assert summary["write_errors"] == 0 and summary["recorder_dropped_records"] == 0
    json.dumps(summary, allow_nan=False)  # `ringscope info` prints standard JSON
    took = time.monotonic() - started
    print(f"fuzz: {sum(sent.values())} hostile + {agent_floods + run_floods + rank_blocks + 2} accepted-hostile "
          f"messages, {2 * expected} real steps, peak RSS +{peak_mb:.0f} MB, {took:.1f} s")
    assert peak_mb < RSS_GROWTH_LIMIT_MB, f"recorder grew by {peak_mb:.0f} MB"


def test_a_flood_of_large_valid_messages_stays_bounded_in_memory_and_counts_its_drops(recordings, push) -> None:
    recording = recordings("flood", extra=("--queue-mb", "64"))
    sock = push(recording.endpoint)
    text = "x" * 16_000
    per_message = 240  # 240 x 16 KB events: ~3.9 MB, just under the 4 MiB limit
    messages = 100
    for seq in range(messages):
        payload = wire.encode("flood", seq, 1.0, [Event(1.0, "warning", step=i, text=text) for i in range(per_message)])
        assert len(payload) <= wire.MAX_MESSAGE_BYTES
        sock.send(payload)

    def accounted() -> int:
        rows = dict(_query(recording.out, "SELECT key, value FROM meta WHERE key IN ('records', "
                                          "'recorder_dropped_records')"))
        return int(rows.get("records", 0)) + int(rows.get("recorder_dropped_records", 0))
    assert _wait(lambda: accounted() == messages * per_message, 120)
    peak_mb = recording.peak_growth_mb()
    code, err = recording.stop()
    summary = summarize(recording.out)
    dropped = summary["recorder_dropped_records"]
    # drops are counted in the file and said in the last line; they make the exit code 1 (a recording with holes)
    assert code == (1 if dropped else 0) and (not dropped or f"{dropped} received record(s) were dropped" in err), err
    written = len(load(recording.out).events)
    print(f"flood: {messages} x {len(payload) / 1e6:.1f} MB, {written} events written, "
          f"{summary['recorder_dropped_records']} dropped (counted), peak RSS +{peak_mb:.0f} MB")
    assert written + summary["recorder_dropped_records"] == messages * per_message
    assert peak_mb < RSS_GROWTH_LIMIT_MB, f"recorder grew by {peak_mb:.0f} MB"


# ---- Losses are visible ------------------------------------------------------------------------------------------


def test_a_killed_and_restarted_recorder_loses_no_step(recordings) -> None:
    """SIGKILL mid-run, restart on the same endpoint: the agents send again what the dead one had not committed
    (acknowledged delivery), so the two files together hold every step, and neither holds a step twice."""
    bind = f"tcp://127.0.0.1:{free_port()}"
    first = recordings("before", bind=bind)
    streamer = Streamer(bind, "restart", ranks=2)
    try:
        assert _wait(lambda: sum(_steps_by_rank(first.out).values()) >= 4000, 30)
        time.sleep(0.5)  # some of it acknowledged
        first.kill()  # SIGKILL while the agents stream
        time.sleep(2.0)  # down for a while: the agents keep what they produce meanwhile
        second = recordings("after", bind=bind)
        assert _wait(lambda: sum(_steps_by_rank(second.out).values()) >= 2000, 30)
    finally:
        streamer.close()
    sent = streamer.steps
    ids = {t.identity.agent_id for t in streamer.agents}
    stats = {t.identity.agent_id: t.stats for t in streamer.agents}  # what each agent says it dropped or resent
    assert _wait(lambda: all(_last_step_by_agent(second.out).get(i, -1) == sent - 1 for i in ids), 30)
    code, err = second.stop()
    assert code == 0, err
    before, after = summarize(first.out), summarize(second.out)
    late = {entry["agent_id"]: entry["first_seq_seen"] for entry in after["joined_late"]}
    assert set(late) == ids
    seen: dict[str, list[int]] = {}
    for data in (load(first.out), load(second.out)):
        in_file: dict[str, list[int]] = {}
        for step, agent_id in zip(data.steps["step"], data.steps["agent_id"], strict=True):
            in_file.setdefault(str(agent_id), []).append(int(step))
        for agent_id, steps in in_file.items():
            assert len(steps) == len(set(steps)), f"{agent_id}: a step stored twice in one file"
            seen.setdefault(agent_id, []).extend(steps)
    for agent_id in ids:
        last_before = before["sequences"][agent_id]["last_seq"]  # committed before the kill
        first_after = after["sequences"][agent_id]["first_seq"]
        # the new collector got everything from the oldest message not acknowledged as committed
        assert first_after == late[agent_id] <= last_before + 1
        missing = sorted(set(range(sent)) - set(seen[agent_id]))
        assert not missing, (agent_id, len(missing), missing[:3], missing[-3:], stats[agent_id],
                             before["sequences"][agent_id], after["sequences"][agent_id], after["gaps"])
        overlap = len(seen[agent_id]) - len(set(seen[agent_id]))
        print(f"agent {agent_id}: first file up to seq {last_before}, second from {first_after}; 0 steps lost, "
              f"{overlap} step(s) in both files (committed, not yet acknowledged at the kill)")
    healths = load(second.out).health
    assert int(max(healths["disconnects"])) >= 1  # the agents say their connection dropped


def test_record_exits_1_and_says_so_when_rows_cannot_be_written(recordings) -> None:
    def small_files() -> None:  # the disk "fills up" at 400 KB: writes fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, 400_000))

    recording = recordings("full", preexec=small_files)
    streamer = Streamer(recording.endpoint, "full", ranks=1, steps_per_s=5000)
    try:
        assert _wait(lambda: "WRITE" in recording.stderr_path.read_text() or "write error" in
                     recording.stderr_path.read_text(), 60)
    finally:
        streamer.close()
    code, err = recording.stop()
    assert code == 1, err
    assert "could not be written" in err and "free space" in err
    # what was committed before is readable (the file cannot count its own errors while nothing can be written)
    assert summarize(recording.out)["steps_total"] > 0


def test_record_warns_once_that_a_plaintext_bind_beyond_loopback_admits_anyone(recordings) -> None:
    recording = recordings("open", bind="tcp://0.0.0.0:0")
    code, err = recording.stop()
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "anyone" in line]
    assert len(warnings) == 1 and "--secure" in warnings[0], err


def test_an_older_agents_health_and_a_newer_agents_records_are_both_recorded(recordings, push) -> None:
    recording = recordings("versions")
    sock = push(recording.endpoint)
    sock.send(hostile.envelope([["health", [1.0, 0, 1, 2, 3, 4, 5, 6]]], agent_id="old", version=[1, 0]))
    sock.send(wire.encode("new", 0, 1.0, [GpuSample(1.0, "h", 0, util_pct=5.0)]))
    assert _wait(lambda: _count(recording.out, "gpu") == 1 and _count(recording.out, "health") == 1, 20)
    code, err = recording.stop()
    assert code == 0, err
    data = load(recording.out)
    assert len(data.health["ts_s"]) == 1 and str(data.health["disconnects"][0]) == "nan"
