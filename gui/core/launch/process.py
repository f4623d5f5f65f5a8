"""One started process: its own process group, merged stdout+stderr read by a thread into a bounded buffer.

``ManagedProcess`` owns the ``Popen``, the reader thread and the output buffer. Its state only changes in
``update()``, which the launcher calls from its owner's thread (the GUI timer); the reader thread only appends
lines. It never imports Qt, and never blocks longer than a signal send.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import IO, Final, Literal

import psutil

from ringscope.gui.core.launch.plan import ProcessPlan

ProcessState = Literal["starting", "running", "exited", "killed", "failed"]
FINAL_STATES: Final[frozenset[str]] = frozenset({"exited", "killed", "failed"})
MAX_LINE_CHARS: Final[int] = 4000
STARTING_S: Final[float] = 1.0  # "starting" until first output or this long alive
DRAIN_S: Final[float] = 1.0  # after exit, wait this long at most for the reader to collect the last lines
TOKEN_ENV: Final[str] = "RINGSCOPE_PROCESS_TOKEN"
"""Set in a started process's environment to a value of its own, which every process it starts inherits: a stop
finds by it the descendants it could not see as children (one started while the stop waited, then orphaned)."""


class OutputBuffer:
    """Last ``capacity`` lines of a process, appended by the reader thread, read by the GUI thread.

    Lines are numbered from 0 in arrival order, so a reader can ask for "everything after line k" and learn how
    many lines it missed when the buffer overflowed in between.
    """

    def __init__(self, capacity: int = 2000) -> None:
        self._lines: deque[str] = deque(maxlen=capacity)
        self._total = 0
        self._lock = threading.Lock()

    def append(self, line: str) -> None:
        """Add one line (called by the reader thread)."""
        with self._lock:
            self._lines.append(line)
            self._total += 1

    @property
    def total(self) -> int:
        """Lines received since the start (including those no longer held)."""
        with self._lock:
            return self._total

    def since(self, seen: int) -> tuple[int, int, list[str]]:
        """Lines numbered ``>= seen``: returns (new ``seen``, lines that overflowed unread, the lines)."""
        with self._lock:
            first_held = self._total - len(self._lines)
            start = max(seen, first_held)
            lines = list(self._lines)[start - first_held:]
            return self._total, start - seen, lines

    def tail(self, count: int) -> list[str]:
        """The last ``count`` lines."""
        with self._lock:
            return list(self._lines)[-count:] if count > 0 else []


@dataclass(frozen=True, slots=True)
class StateChange:
    """A process moved from ``old`` to ``new`` state; ``message`` says it in words (with exit code, last lines)."""

    run_id: str
    name: str
    old: ProcessState
    new: ProcessState
    returncode: int | None
    message: str


class ManagedProcess:
    """A started process of one run. Read ``name``, ``pid``, ``state``, ``returncode``, ``output``."""

    def __init__(self, plan: ProcessPlan, run_id: str, buffer_lines: int = 2000, *, capture: bool = True) -> None:
        """``capture=False``: the process writes to this process's stdout/stderr (``ringscope run``), nothing is
        buffered."""
        self.plan = plan
        self.name = plan.name
        self.run_id = run_id
        self.output = OutputBuffer(buffer_lines)
        self.state: ProcessState = "starting"
        self.returncode: int | None = None
        self.started_s = time.monotonic()
        self.ended_s: float | None = None
        self.stop_requested_s: float | None = None
        self._kill_at_s: float | None = None
        self._exit_seen_s: float | None = None
        self._descendants: list[psutil.Process] = []
        self._token = uuid.uuid4().hex if plan.local else None  # see TOKEN_ENV
        self._popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        try:
            # Own session = own process group, so a stop reaches torchrun and everything it started.
            env = plan.full_env()
            if self._token is not None:
                env[TOKEN_ENV] = self._token
            self._popen = subprocess.Popen(plan.argv, cwd=plan.cwd, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE if capture else None,
                                           stderr=subprocess.STDOUT if capture else None, start_new_session=True)
        except OSError as error:
            self.output.append(f"could not start {plan.argv[0]!r}: {error}")
            self.state, self.returncode, self.ended_s = "failed", None, time.monotonic()
            return
        if not capture:
            return
        self._reader = threading.Thread(target=self._read, args=(self._popen.stdout,),
                                        name=f"ringscope-output-{self.name}", daemon=True)
        self._reader.start()

    # ---- Public API ------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Operating-system process id (None when it never started)."""
        return None if self._popen is None else self._popen.pid

    @property
    def alive(self) -> bool:
        """True until the process has been seen to end (state not final)."""
        return self.state not in FINAL_STATES

    def last_lines(self, count: int = 20) -> list[str]:
        """The last ``count`` output lines."""
        return self.output.tail(count)

    def describe(self, lines: int = 5) -> str:
        """One message for the user: state, exit code and, for a failure, the last output lines."""
        if self.state in ("starting", "running"):
            return f"{self.name} (pid {self.pid}) is {self.state}"
        code = "no exit code" if self.returncode is None else _code_text(self.returncode)
        text = f"{self.name} (pid {self.pid}) {self.state} with {code}"
        if self.state == "failed":
            tail = self.last_lines(lines)
            text += "; last output:\n" + "\n".join(tail) if tail else "; it printed nothing"
        return text

    def request_stop(self, grace_s: float, sig: int | None = signal.SIGTERM) -> None:
        """Ask the process group to stop (``sig``), and force it with SIGKILL once ``grace_s`` has passed.

        ``sig=None`` sends nothing now, only the SIGKILL at the deadline: for an ssh client whose remote processes
        are stopped another way, so that it can still pass on their last lines and exit status.
        """
        if not self.alive or self._popen is None:
            return
        now = time.monotonic()
        if self.stop_requested_s is None:
            self.stop_requested_s = now
            self._remember_descendants()
            if sig is not None:
                self._signal(sig)
        deadline = now + max(grace_s, 0.0)
        self._kill_at_s = deadline if self._kill_at_s is None else min(self._kill_at_s, deadline)

    def kill(self) -> None:
        """SIGKILL the process group and every descendant seen (torchrun puts ranks in sessions of their own)."""
        if self._popen is None or (self._popen.poll() is not None and not self._descendants):
            return
        if self.stop_requested_s is None:
            self.stop_requested_s = time.monotonic()
        reaped = self._popen.returncode is not None
        self._remember_descendants(leader_gone=reaped)
        self._signal(signal.SIGKILL, leader_gone=reaped)
        self._kill_at_s = None

    def update(self) -> StateChange | None:
        """Advance the state (call periodically from one thread); returns the change, if any."""
        if not self.alive or self._popen is None:
            return None
        old = self.state
        now = time.monotonic()
        if self._kill_at_s is not None and now >= self._kill_at_s:
            self.kill()
        code = self._popen.poll()
        if code is None:
            if self.state == "starting" and (self.output.total > 0 or now - self.started_s >= STARTING_S):
                self.state = "running"
        else:
            self._exit_seen_s = self._exit_seen_s or now
            reader_done = self._reader is None or not self._reader.is_alive()
            if not reader_done and now - self._exit_seen_s < DRAIN_S:
                return None  # report the end once its last lines are in
            self._finish(code)
        if self.state == old:
            return None
        return StateChange(self.run_id, self.name, old, self.state, self.returncode, self.describe())

    # ---- Internals -------------------------------------------------------------------------------------------

    def _finish(self, code: int) -> None:
        self.returncode = code
        self.ended_s = time.monotonic()
        if self.stop_requested_s is not None and code != 0:
            self.state = "killed"  # ended by our stop; a crash by signal without a stop is a failure
        else:
            self.state = "exited" if code == 0 else "failed"
        if self._kill_at_s is not None or self.stop_requested_s is not None:
            # The group leader is gone; make sure nothing it started survives it, including what it started while
            # the stop waited (torchrun spawning a rank when the stop came): orphans are found by their token.
            self._remember_descendants(leader_gone=True)
            self._signal(signal.SIGKILL, leader_gone=True)

    def _remember_descendants(self, *, leader_gone: bool = False) -> None:
        """Add the process's descendants alive now to those a stop signals (children of children, ranks in sessions
        of their own; once a stop was asked for, also those the leader no longer parents)."""
        if self._popen is None:
            return
        found: list[psutil.Process] = []
        if not leader_gone:  # a reaped leader's pid may name another process by now: only the token is trusted
            try:
                found = psutil.Process(self._popen.pid).children(recursive=True)
            except psutil.Error:
                pass
        known = {p.pid for p in self._descendants}
        self._descendants += [p for p in found if p.pid not in known]
        if self.stop_requested_s is not None and self._token is not None:  # the leader is signalled by its group
            known |= {p.pid for p in found} | {self._popen.pid}
            self._descendants += _carrying(TOKEN_ENV, self._token, known)

    def _signal(self, sig: int, *, leader_gone: bool = False) -> None:
        """``sig`` to every remembered descendant and to each one's process group, and to the leader's group. Once
        the leader is reaped its pid is not trusted as a group (a new group leader may have that pid by then): its
        group is signalled only through a remembered member that is still running (``is_running`` checks reuse)."""
        if self._popen is None:
            return
        groups = set() if leader_gone else {self._popen.pid}
        for child in self._descendants:
            try:
                if child.is_running():  # psutil checks the pid was not reused by another process
                    groups.add(os.getpgid(child.pid))
                    child.send_signal(sig)
            except (psutil.Error, OSError):
                pass
        for group in groups:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _read(self, stream: IO[bytes]) -> None:
        # Runs on the reader thread: only appends to the buffer, never touches state.
        with stream:
            for raw in iter(stream.readline, b""):
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                text = text.rsplit("\r", 1)[-1]  # progress bars redraw with \r: keep what is shown last
                if len(text) > MAX_LINE_CHARS:
                    text = text[:MAX_LINE_CHARS] + " ...[line truncated]"
                self.output.append(text)


def shell_exit_code(code: int) -> int:
    """A ``Popen`` return code as a shell reports it: 128 + N for a process ended by signal N."""
    return 128 - code if code < 0 else code


def _code_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


def _carrying(name: str, value: str, known: set[int]) -> list[psutil.Process]:
    """The processes (other than ``known``) whose environment has ``name=value``: a stop's last sweep for orphans
    (reads every process's environment once, ~10-30 ms; processes of other users are skipped)."""
    found = []
    for process in psutil.process_iter(["environ"]):
        try:
            if process.pid not in known and (process.info.get("environ") or {}).get(name) == value:
                found.append(process)
        except (psutil.Error, AttributeError):
            continue
    return found
