"""SIGTERM (torchrun's teardown, Slurm, Kubernetes) hands over what the agent holds, even from a blocked rank, and
leaves alone what is not the agent's: a program's own handler, a forked data-loader worker.

Real processes, real signals and a real collector. The agents flush every 30 s, so without the SIGTERM path nothing
they were given would ever leave them before the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ringscope.agent.schema import Event
from ringscope.agent.termination import FLUSH_S
from tests.sinks import wait_for

STEPS = 500

SCRIPT = f"""
import os, signal, sys, time
from ringscope import agent
from ringscope.agent import termination
endpoint, mode = sys.argv[1], sys.argv[2]

def own(signum, frame):
    print("own handler", flush=True)
    sys.exit(3)

if mode == "own-before":
    signal.signal(signal.SIGTERM, own)
telemetry = agent.start(framework="other", strategy="ddp", rank=0, world_size=1, endpoint=endpoint, run_id="term",
                        sample_devices=False, heartbeat=False, flush_interval_s=30.0)
others = [agent.start(framework="other", strategy="ddp", rank=r, world_size=4, endpoint=endpoint, run_id="term",
                      sample_devices=False, heartbeat=False, flush_interval_s=30.0)
          for r in range(1, 4)] if mode == "several" else []
if mode == "own-after":  # e.g. a framework's preemption handler, installed after the agent
    signal.signal(signal.SIGTERM, own)
print("watching" if termination.watching() else "not watching", flush=True)
for i in range({STEPS}):
    telemetry.step(0, i, 100.0 + i, 100.5 + i)
    for r, other in enumerate(others, 1):
        other.step(r, i, 100.0 + i, 100.5 + i)
if mode == "fork":  # a data-loader worker: forked after the agent started
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print("child", child, flush=True)
    _, status = os.waitpid(child, 0)
    print("child ended", os.waitstatus_to_exitcode(status), flush=True)
if mode == "blocked":
    # as a rank inside a C++ collective whose peer is gone: the main thread never runs Python again (SIGTERM is
    # delivered to another thread, and the sleep below is not interrupted)
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
if mode in ("exiting", "closing"):  # SIGTERM while the agent closes: torchrun tears down a rank whose peer died
    publisher = telemetry._publisher

    def still_busy():  # the sender is still busy when close wakes it: nothing has been handed over yet
        if publisher._stop.is_set():
            publisher.remove_producer(still_busy)
            print("closing", flush=True)
            time.sleep(0.5)

    publisher.add_producer(still_busy)
    if mode == "closing":
        telemetry.close(10.0)  # a `with` block's end, or the probe's close
        print("closed", flush=True)
    else:
        raise RuntimeError("gloo: connection closed by peer")  # its exception ends it: atexit closes the agent
print("ready", flush=True)
time.sleep(60)
print("slept", flush=True)
"""


def _start(endpoint: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, endpoint, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})


def _read_until(proc: subprocess.Popen[str], line: str) -> list[str]:
    assert proc.stdout is not None
    lines = []
    while not lines or lines[-1] != line:
        text = proc.stdout.readline()
        assert text, f"the process ended before printing {line!r}: {lines}, {proc.communicate()[1][-2000:]}"
        lines.append(text.strip())
    return lines


def _term(proc: subprocess.Popen[str]) -> tuple[int, float, str]:
    """SIGTERM, then (exit code, seconds until the process ended, the rest of its output)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, time.monotonic() - started, out + err


@pytest.mark.parametrize("mode", ["blocked", "idle", "several"])
def test_sigterm_hands_over_what_the_agent_holds_and_ends_the_process_as_sigterm_would(collector, mode) -> None:
    """``blocked``: the watcher thread (the main thread never runs Python again); ``idle``: the main thread's
    handler, or the watcher, whichever comes first; ``several``: four agents in one process, flushed side by side."""
    agents = 4 if mode == "several" else 1
    collector, sink = collector
    proc = _start(collector.endpoint, mode)
    try:
        assert _read_until(proc, "ready")[0] == "watching"
        time.sleep(0.3)
        assert sink.steps() == []  # a 30 s flush: nothing has left the agent before the signal
        code, took, output = _term(proc)
    finally:
        proc.kill()
    assert code == -signal.SIGTERM, output  # the exit status SIGTERM's default action gives (torchrun: -15)
    assert took < FLUSH_S + 2.0, output
    assert "slept" not in output
    assert wait_for(lambda: len(sink.steps()) == agents * STEPS, 5.0)
    for rank in range(agents):  # every step of every agent, in order, none twice
        assert [s.step for s in sink.steps() if s.rank == rank] == list(range(STEPS))
    events = [r for b, _ in sink.batches for r in b.records if isinstance(r, Event)]
    assert sorted(e.event for e in events) == ["started"] * agents + ["warning"] * agents
    assert all("SIGTERM" in (e.text or "") for e in events if e.event == "warning")
    assert sink.gaps == [] and sink.rejections == []


@pytest.mark.parametrize("mode", ["exiting", "closing"])
def test_sigterm_while_the_agent_closes_waits_for_what_it_is_handing_over(collector, mode) -> None:
    """``exiting``: a rank's exception ends it, and atexit is closing the agent when torchrun's SIGTERM comes;
    ``closing``: the program itself closes the agent. Before, the signal ended the process at once (the second
    close returned, or the agent was no longer registered) and the steps still queued were lost."""
    collector, sink = collector
    proc = _start(collector.endpoint, mode)
    try:
        assert _read_until(proc, "closing")[0] == "watching"
        code, took, output = _term(proc)
    finally:
        proc.kill()
    assert code == -signal.SIGTERM, output
    assert took < FLUSH_S + 2.0, output
    assert "closed" not in output.splitlines()
    assert "never confirmed" not in output  # the dying process's close says nothing about acknowledgements
    assert wait_for(lambda: len(sink.steps()) == STEPS, 5.0), f"{len(sink.steps())} of {STEPS} steps: {output}"
    assert [s.step for s in sink.steps()] == list(range(STEPS))
    assert sink.gaps == [] and sink.rejections == []


def test_a_forked_worker_dies_of_sigterm_at_once_and_leaves_the_parent_alone(collector) -> None:
    collector, sink = collector
    proc = _start(collector.endpoint, "fork")
    try:
        _read_until(proc, "watching")
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[0] == "child", words
        child = int(words[1])
        started = time.monotonic()
        os.kill(child, signal.SIGTERM)
        ended = proc.stdout.readline().split()
        took = time.monotonic() - started
        assert ended == ["child", "ended", str(-signal.SIGTERM)], ended  # the default action, in the child
        assert took < 1.0  # nothing flushed there: the agents are the parent's
        assert _read_until(proc, "ready")[-1] == "ready"
        time.sleep(FLUSH_S + 0.5)
        assert proc.poll() is None, proc.communicate()  # the child's SIGTERM did not reach the parent's watcher
        assert sink.steps() == []
        code, _, output = _term(proc)
    finally:
        proc.kill()
    assert code == -signal.SIGTERM, output
    assert wait_for(lambda: len(sink.steps()) == STEPS, 5.0)


@pytest.mark.parametrize("mode", ["own-before", "own-after"])
def test_a_programs_own_sigterm_handler_is_left_to_decide(collector, mode) -> None:
    """Installed before the agent, the agent does not take SIGTERM; installed after (a framework's preemption
    handler), it wins and the agent's watcher stands aside."""
    collector, sink = collector
    proc = _start(collector.endpoint, mode)
    try:
        lines = _read_until(proc, "ready")
        assert lines[0] == "not watching"
        code, _, output = _term(proc)
    finally:
        proc.kill()
    assert "own handler" in output and code == 3, output  # the program's handler ran, and decided the exit
    assert "SIGTERM: this process is being stopped" not in output
    events = [r for b, _ in sink.batches for r in b.records if isinstance(r, Event)]
    assert not [e for e in events if e.event == "warning"]  # the agent did not act on the signal
