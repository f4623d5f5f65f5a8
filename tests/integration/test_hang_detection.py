"""A real 2-rank DDP training whose rank 1 blocks forever at step 50: ``ringscope record`` names it hung within the
threshold + 3 s, with rank 1's stack; a SIGKILLed rank is lost within 3 s. Real torchrun, gloo, ZeroMQ, SQLite."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ringscope.gui.core.analysis.stacks import fold
from ringscope.gui.core.ingest.ask import ask
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "ddp_hang.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
THRESHOLD_S = 10.0  # record's default --hang-after; steps of ~6 ms: max(10 s, 20 x step) = 10 s

pytestmark = pytest.mark.slow


class Lines:
    """A process's output lines, read on a thread, waited for with a timeout (never a blocking read)."""

    def __init__(self, process: subprocess.Popen[str], stream: object) -> None:
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put((time.time(), line.rstrip("\n")))

    def wait_for(self, text: str, timeout_s: float) -> tuple[float, str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                stamp, line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return stamp, line
        raise AssertionError(f"{text!r} not seen within {timeout_s} s; output so far:\n" + "\n".join(self.seen[-40:]))


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill the process and every descendant: torchrun starts its ranks in sessions of their own, so killing its
    process group would leave them running."""
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=10)
    process.wait(10)


@pytest.fixture()
def recording(tmp_path: Path) -> Iterator[tuple[Path, str, Lines, subprocess.Popen[str]]]:
    out = tmp_path / "s.db"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    record = subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(out), "--bind",
                               endpoint,
                               "--progress-s", "0"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    lines = Lines(record, record.stderr)
    try:
        yield out, endpoint, lines, record
    finally:
        if record.poll() is None:
            record.send_signal(signal.SIGINT)  # a clean stop: the file is closed and indexed
            try:
                record.wait(20)
            except subprocess.TimeoutExpired:
                _kill_group(record)


def _training(endpoint: str, *extra: str) -> tuple[subprocess.Popen[str], Lines]:
    env = dict(os.environ, RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID="hang-run", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS="1")
    process = subprocess.Popen([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(SCRIPT), *extra],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    return process, Lines(process, process.stdout)


def test_a_rank_blocked_forever_is_named_hung_with_its_stack(recording: tuple) -> None:  # type: ignore[type-arg]
    out, endpoint, record_lines, record = recording
    training, output = _training(endpoint, "--hang-rank", "1", "--hang-at-step", "50")
    try:
        blocked_at = float(output.wait_for("BLOCKING", 120)[1].split()[1])
        # stacks on demand, long before the automatic stack (5 s in one phase) or the hang verdict: the stuck rank
        # sits in the function that blocks it, the other one waits for it inside its backward pass's all-reduce
        time.sleep(1.0)
        asked_at = time.monotonic()
        result = ask(endpoint, "stacks", run_id="hang-run", wait_s=2.0)
        answered_in, since_block = time.monotonic() - asked_at, time.time() - blocked_at
        folded = fold(result)
        stuck = next(g for g in folded.training if g.ranks == (1,))
        waiting = next(g for g in folded.training if g.ranks == (0,))
        print(f"stacks on demand answered in {answered_in:.2f} s, {since_block:.1f} s after rank 1 blocked")
        assert answered_in < 2.0 and since_block < 5.0 and result["answered"] == 2
        assert [f[2] for f in stuck.frames[-3:]][:2] == ["block_forever", "wait"], stuck.frames[-3:]
        assert any(f[2] == "backward" for f in waiting.frames), waiting.frames[-5:]
        detected_at, line = record_lines.wait_for("-> hung", THRESHOLD_S + 30)
        _, verdict = record_lines.wait_for("did not reach the collective", 5)
        # the threshold counts from the last completed step, a few ms before rank 1 blocked
        print(f"hung named {detected_at - blocked_at:.2f} s after rank 1 blocked (threshold {THRESHOLD_S:g} s)")
        assert detected_at - blocked_at <= THRESHOLD_S + 3.0, (detected_at - blocked_at, line)
        assert "rank 1 (in compute, step 50)" in verdict and "1 rank(s) wait in AllReduce" in verdict
    finally:
        _kill_group(training)
    record.send_signal(signal.SIGINT)
    record.wait(30)
    info = json.loads(subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(out)], cwd=ROOT,
                                     capture_output=True, text=True, timeout=60, check=True).stdout)
    [hang] = info["hangs"]
    assert hang["run_id"] == "hang-run" and hang["rank"] == 1 and hang["step"] == 50
    assert "in block_forever" in hang["text"] and "threading.Event().wait()  # the hang: this line" in hang["text"]
    assert "ddp_hang.py" in hang["text"]
    [run] = info["runs"]
    assert run["run_id"] == "hang-run" and run["world_size"] == 2


def test_a_sigkilled_rank_is_lost_within_three_seconds(recording: tuple) -> None:  # type: ignore[type-arg]
    _out, endpoint, record_lines, _record = recording
    training, output = _training(endpoint, "--hang-rank", "-1")
    try:
        output.wait_for("READY", 120)
        deadline = time.monotonic() + 30  # both ranks train; their lines may arrive in either order, or run together
        while "".join(output.seen).count("READY") < 2 and time.monotonic() < deadline:
            try:
                output.wait_for("READY", 0.5)
            except AssertionError:
                pass
        assert "".join(output.seen).count("READY") >= 2, output.seen
        time.sleep(3.0)  # steps flowing, heartbeats sent
        ranks = subprocess.run(["pgrep", "-f", f"{SCRIPT.name}"], capture_output=True, text=True, check=False)
        pids = [int(p) for p in ranks.stdout.split() if int(p) != training.pid]
        assert len(pids) >= 2, ranks.stdout
        victim = max(pids)  # a rank process (torchrun's own process runs the script name too: not the group leader)
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        lost_at, line = record_lines.wait_for("-> lost", 15)
        print(f"lost named {lost_at - killed_at:.2f} s after SIGKILL")
        assert lost_at - killed_at <= 3.0, (lost_at - killed_at, line)
    finally:
        _kill_group(training)
