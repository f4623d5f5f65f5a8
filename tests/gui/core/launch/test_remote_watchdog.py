"""The watchdog a multi-node run's commands run under on each host (``WATCHDOG_CODE``), run here without ssh: the
output and exit status pass through it, and when nothing reads its output any more (the ssh session gone) it stops
the run's processes of its host, and only those. The real thing over sshd is in tests/multinode/test_ssh_launch.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ringscope.gui.core.launch import LaunchSpec
from ringscope.gui.core.launch.remote import DISCONNECT_GRACE_S, WATCHDOG_CODE, stop_marker, watchdog_words
from tests.multinode.hosts import marked_processes

RUN_ID = "wd-run"
# one write for the whole line: two sleepers share the watchdog's output pipe
SLEEPER = ("import os, signal, sys, time\n"
           "if sys.argv[1] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "os.write(1, ('ready ' + sys.argv[1] + '\\n').encode())\n"
           "time.sleep(60)\n")


def watched(host: str, command: list[str], grace_s: float = 0.5) -> list[str]:
    """``command`` under the watchdog of ``RUN_ID`` on ``host``, with a short grace period."""
    words = watchdog_words(LaunchSpec(run_id=RUN_ID), host)
    return [*words[:-1], f"{grace_s:g}", *command]


def marked(host: str, label: str) -> list[str]:
    """A sleeper marked as ``RUN_ID``'s on ``host`` (``label`` 'stubborn' ignores SIGTERM)."""
    assignments = [f"{key}={value}" for key, value in stop_marker(LaunchSpec(run_id=RUN_ID), host).items()]
    return ["env", *assignments, sys.executable, "-c", SLEEPER, label]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; each one's group is killed at teardown, and nothing marked is left behind."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    for host in ("node-0", "node-1"):
        for pid in marked_processes(RUN_ID, host):
            os.kill(pid, signal.SIGKILL)


def test_the_watchdog_passes_output_and_exit_status_through() -> None:
    done = subprocess.run(watched("node-0", [sys.executable, "-c", "print('hello'); raise SystemExit(3)"]),
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (3, "hello\n"), done.stderr
    killed = subprocess.run(watched("node-0", [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"]),
                            capture_output=True, text=True, timeout=30)
    assert killed.returncode == 128 + signal.SIGKILL  # as a shell reports a command killed by a signal
    assert watchdog_words(LaunchSpec(run_id=RUN_ID), "node-0")[-1] == f"{DISCONNECT_GRACE_S:g}"
    assert watchdog_words(LaunchSpec(run_id=RUN_ID), "node-0")[:3] == [sys.executable, "-c", WATCHDOG_CODE]


def test_when_nothing_reads_its_output_the_watchdog_stops_its_hosts_processes_of_the_run(
        started: list[subprocess.Popen[bytes]]) -> None:
    # host node-0: two processes of the run under one shell (one ignores SIGTERM); node-1's is another host's
    script = f"{shlex.join(marked('node-0', 'polite'))} & {shlex.join(marked('node-0', 'stubborn'))} & wait"
    watchdog = subprocess.Popen(watched("node-0", ["sh", "-c", script]), stdout=subprocess.PIPE,
                                start_new_session=True)
    started.append(watchdog)
    other = subprocess.Popen(marked("node-1", "polite"), stdout=subprocess.PIPE, start_new_session=True)
    started.append(other)
    assert watchdog.stdout is not None and other.stdout is not None
    assert sorted([watchdog.stdout.readline(), watchdog.stdout.readline()]) == [b"ready polite\n",
                                                                                b"ready stubborn\n"]
    assert other.stdout.readline() == b"ready polite\n"
    assert len(marked_processes(RUN_ID, "node-0")) == 2

    closed = time.monotonic()
    watchdog.stdout.close()  # what the end of the ssh session does to the sshd side of the pipe
    watchdog.wait(timeout=10)
    took_s = time.monotonic() - closed
    deadline = time.monotonic() + 5
    while marked_processes(RUN_ID, "node-0") and time.monotonic() < deadline:
        time.sleep(0.05)  # the killed processes are reaped by init once the watchdog is gone
    assert marked_processes(RUN_ID, "node-0") == []
    assert took_s < 0.5 + 5, took_s  # SIGKILL after the 0.5 s grace for the one that ignores SIGTERM
    # node-1's process is not node-0's to stop
    assert other.poll() is None and len(marked_processes(RUN_ID, "node-1")) == 1
