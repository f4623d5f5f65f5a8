"""The window's handle on the ingest process: start it, call it, and start a new one in its place when it dies.

What it owns: the ingest process (``python -m ringscope.gui.core.service.server``), its calls channel (serialised
here, ``ringscope.gui.core.service.calls`` declares what may be called), the frames channel's connection handed to
the ``FrameChannel`` (``ringscope.gui.core.service.frame_channel``), and a supervisor thread: an ingest process that
dies unexpectedly is replaced by a new one (same endpoint and keys, the same recording continued), which is given
the settings the window made again; the window is told (``restarted``), or why it gave up (``failure``).

What it must never do: import Qt, or block a window thread on a call longer than ``CALL_TIMEOUT_S``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import ringscope
from ringscope.gui.core.ingest.collector import CollectorError
from ringscope.gui.core.service.calls import CALL_TIMEOUT_S, replay_key
from ringscope.gui.core.service.frame_channel import FrameChannel
from ringscope.gui.core.service.server import IngestSetup

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final[float] = 60.0
"""How long the window waits for the ingest process to bind (imports take ~1 s; a loaded machine more)."""
CLOSE_TIMEOUT_S: Final[float] = 20.0
MAX_RESTARTS: Final[int] = 3
RESTART_WINDOW_S: Final[float] = 60.0
"""An ingest process that ends unexpectedly is replaced at most ``MAX_RESTARTS`` times within ``RESTART_WINDOW_S``;
one that keeps dying is left stopped (``IngestProcess.failure`` says so): a crash loop would only hide the cause."""
CLEAN_EXIT_GRACE_S: Final[float] = 3.0
"""An ingest process that ends with exit code 0 closed its recording on a SIGTERM. Sent to the window's whole process
group (GNU ``timeout``, a terminal's job control) or to every process of its cgroup (systemd), the window got it too
and closes within a heartbeat (0.2 s): the supervisor waits this long for that close before it starts a new one."""
CLOSED_ITSELF: Final[str] = "it closed itself (exit code 0): a SIGTERM sent to the ingest process alone"
"""Why an ingest process ended with exit code 0 while its window was not closing: its SIGTERM handler closed the
recording, so someone signalled it and not the window as a whole. Not a crash; it is replaced all the same."""


class IngestError(RuntimeError):
    """The ingest process is gone, or refused a call; the message says which and why."""


class IngestProcess:
    """Starts ``python -m ringscope.gui.core.service.server`` and talks to it over two socket pairs (frames, calls).

    When the process dies without being closed (a crash, a kill), a supervisor thread starts a new one in its place
    (``MAX_RESTARTS`` within ``RESTART_WINDOW_S``): on the same endpoint with the same keys, so the agents reconnect
    and send again what was not acknowledged, continuing the same recording as a new segment, with the recording's
    runs reloaded (``IngestSetup.resume_reason``). Meanwhile calls raise ``IngestError`` and frames wait; the
    window's channels switch to the new process by themselves. ``restarted`` says what happened, ``failure`` when it
    gave up.
    """

    def __init__(self, setup: IngestSetup, *, max_restarts: int = MAX_RESTARTS,
                 restart_window_s: float = RESTART_WINDOW_S) -> None:
        self.setup = setup
        self.endpoint = ""
        self.recording_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._calls: Connection | None = None
        self._calls_lock = threading.Lock()
        self._frames_link: tuple[int, Connection] | None = None  # (generation, the current process's frames end)
        self.frames: FrameChannel | None = None
        self._closing = threading.Event()  # set by close(): no restart follows; a supervisor waiting out a clean exit
        # stops waiting at once
        self._failure: str | None = None
        self._max_restarts, self._restart_window_s = max_restarts, restart_window_s
        self._restart_lock = threading.Lock()  # held by a restart in flight: close waits for it
        self._restart_times: deque[float] = deque()
        self._restarting: str | None = None  # the crash a new process is being started for
        self._restarted: tuple[int, str] | None = None
        self._replay: dict[tuple[str, str, object], tuple[Any, ...]] = {}  # given again to a new process
        self.price: Callable[[], float | None] | None = None  # the window's price per device-hour (metrics)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> IngestProcess:
        """Start the process and wait until it listens. Raises ``CollectorError`` with the reason it could not."""
        self._process, self._calls, frames = _spawn(self.setup)
        self._frames_link = (0, frames)
        self.frames = FrameChannel(frames, self)
        self.endpoint, self.recording_path = _await_ready(self._process, self._calls, timeout_s)
        threading.Thread(target=self._supervise, name="ringscope-ingest-supervisor", daemon=True).start()
        return self

    @property
    def pid(self) -> int | None:
        """The ingest process's pid (None before start)."""
        return self._process.pid if self._process is not None else None

    @property
    def failure(self) -> str | None:
        """Why the ingest process is gone for good: it ended without being closed and was not restarted (None
        while it runs, and while a new one starts in its place)."""
        return self._failure

    @property
    def restarting(self) -> str | None:
        """The crash a new ingest process is being started for (None when none is)."""
        return self._restarting

    @property
    def restarted(self) -> tuple[int, str] | None:
        """(restarts so far, what the window should say about the latest), or None before any."""
        return self._restarted

    @property
    def frames_link(self) -> tuple[int, Connection] | None:
        """The current process's frames connection and its generation (one more per restart)."""
        return self._frames_link

    def note_failure(self, text: str, generation: int | None = None) -> None:
        """A channel broke (``generation``: of which process; None: the current one). A dead process is the
        supervisor's to restart or report; a channel broken to a live process is the end (``failure``)."""
        link = self._frames_link
        if self._closing.is_set() or self._restarting is not None or (
                generation is not None and link is not None and generation != link[0]):
            return
        if self._process is not None:
            try:
                self._process.wait(2.0)
                return
            except subprocess.TimeoutExpired:
                pass
        if self._failure is None:
            self._failure = text

    def call(self, target: str, name: str, *args: Any) -> Any:
        """One call (``calls.EXPOSED``); raises ``IngestError`` when the process is gone (or restarting) or the
        call failed."""
        if self._calls is None:
            raise IngestError("the ingest process is not started")
        with self._calls_lock:
            self._raise_unless_running()
            try:
                self._calls.send((target, name, args))
                if not self._calls.poll(CALL_TIMEOUT_S):
                    raise IngestError(f"the ingest process did not answer {target}.{name} in {CALL_TIMEOUT_S:.0f} s")
                kind, value = self._calls.recv()
            except (EOFError, OSError) as exc:
                self.note_failure(f"the ingest process is gone ({exc or type(exc).__name__})")
                raise IngestError(self.failure or "the ingest process is gone") from exc
        if kind != "ok":
            raise IngestError(f"{target}.{name}: {value}")
        key = replay_key(target, name, args)
        if key is not None:
            self._replay[key] = args  # the latest of each: a new process is given it again
        return value

    def call_quietly(self, target: str, name: str, *args: Any) -> Any:
        """A call whose failure the window survives: logged, None returned (the failure notice says why)."""
        try:
            return self.call(target, name, *args)
        except IngestError as exc:
            log.warning("%s", exc)
            return None

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> dict[str, Any]:
        """Close the collector, then the recording (every record written), and end the process. Returns its
        closing figures (empty when it was gone already)."""
        self._closing.set()
        with self._restart_lock:  # a restart in flight finishes first (its process is closed here); none follows
            pass
        figures: dict[str, Any] = {}
        if self._calls is not None and self._process is not None and self._process.poll() is None:
            with self._calls_lock:
                try:
                    self._calls.send(("close",))
                    deadline = time.monotonic() + timeout_s
                    while time.monotonic() < deadline and self._calls.poll(max(0.0, deadline - time.monotonic())):
                        reply = self._calls.recv()
                        if reply[0] == "closed":
                            figures = reply[1]
                            break
                except (EOFError, OSError):
                    pass
        if self._process is not None:
            try:
                self._process.wait(5.0)
            except subprocess.TimeoutExpired:
                log.warning("the ingest process did not end: killing it")
                _kill(self._process)
        links = (self._calls, self.frames.connection if self.frames is not None else None,
                 self._frames_link[1] if self._frames_link is not None else None)
        for connection in {id(c): c for c in links if c is not None}.values():
            connection.close()
        return figures

    # ---- Restarts (supervisor thread) ----------------------------------------------------------------------------

    def _supervise(self) -> None:
        """Wait for the ingest process to end; unless it was closed, start a new one in its place (or give up)."""
        while True:
            process = self._process
            assert process is not None
            process.wait()
            if process.returncode == 0 and self._closing.wait(CLEAN_EXIT_GRACE_S):
                return  # a signal for the whole window ended it first: the window is closing, not a crash
            with self._restart_lock:
                if self._closing.is_set() or not self._restart(_ended_text(process)):
                    return

    def _restart(self, crash: str) -> bool:
        """A new ingest process on the same endpoint, keys and recording; False (``failure`` says why) when the
        crashes come too fast or the new one does not start."""
        now = time.monotonic()
        recent = self._restart_times
        while recent and now - recent[0] > self._restart_window_s:
            recent.popleft()
        if len(recent) >= self._max_restarts:
            self._failure = f"the ingest process ended unexpectedly ({crash})" + (
                f"; not restarted again: it ended {len(recent) + 1} times within {self._restart_window_s:.0f} s"
                if self._max_restarts else "")
            return False
        recent.append(now)
        self._restarting = crash
        log.warning("the ingest process ended unexpectedly (%s): starting a new one on %s", crash, self.endpoint)
        # the bound endpoint (a port 0 was resolved), so the agents find the new process where they look
        setup = replace(self.setup, bind=self.endpoint, resume_reason=f"the ingest process ended ({crash})",
                        record_to=str(self.recording_path) if self.recording_path is not None else None)
        try:
            process, calls, frames = _spawn(setup)
            try:
                _await_ready(process, calls, START_TIMEOUT_S)
            except CollectorError:
                calls.close()
                frames.close()
                raise
        except (CollectorError, OSError) as exc:
            self._failure = f"the ingest process ended unexpectedly ({crash}); starting a new one failed: {exc}"
            self._restarting = None
            return False
        with self._calls_lock:
            old, self._calls, self._process = self._calls, calls, process
            generation = self._frames_link[0] + 1 if self._frames_link is not None else 0
            self._frames_link = (generation, frames)  # the frame channel switches on its next pump (GUI thread)
        if old is not None:
            old.close()
        self._restarting = None
        for (target, name, _), args in list(self._replay.items()):
            self.call_quietly(target, name, *args)
        recording = ("recording continues in the same session" if self.recording_path is not None
                     else "the session is not recorded: the runs shown start again from now")
        cause = crash if crash == CLOSED_ITSELF else f"crash: {crash}"
        self._restarted = (generation, f"Ingest process restarted ({cause}); {recording}")
        log.warning("%s (in %.1f s)", self._restarted[1], time.monotonic() - now)
        return True

    def _raise_unless_running(self) -> None:
        if self.failure is not None:
            raise IngestError(self.failure)
        if self._restarting is not None:
            raise IngestError(f"the ingest process is being restarted after a crash ({self._restarting}); try again "
                              "in a moment")


def _spawn(setup: IngestSetup) -> tuple[subprocess.Popen[bytes], Connection, Connection]:
    """Start an ingest process and hand it ``setup``: (the process, its calls end, its frames end)."""
    frames_here, frames_there = socket.socketpair()
    calls_here, calls_there = socket.socketpair()
    fds = (frames_there.fileno(), calls_there.fileno())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ringscope.child_pythonpath(), env.get("PYTHONPATH")) if p)
    try:
        process = subprocess.Popen([sys.executable, "-m", "ringscope.gui.core.service.server", *map(str, fds)],
                                   pass_fds=fds, stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        frames_here.close()
        calls_here.close()
        raise
    finally:
        frames_there.close()
        calls_there.close()
    calls = Connection(calls_here.detach())
    calls.send(setup)
    return process, calls, Connection(frames_here.detach())


def _await_ready(process: subprocess.Popen[bytes], calls: Connection, timeout_s: float) -> tuple[str, Path | None]:
    """Wait until the process listens: (its endpoint, its recording). Raises ``CollectorError`` (process ended)."""
    deadline = time.monotonic() + timeout_s
    while not calls.poll(0.1):
        if process.poll() is not None or time.monotonic() > deadline:
            _kill(process)
            raise CollectorError(f"the ingest process did not start ({_ended_text(process)}); its error is above "
                                 "in the terminal")
    try:
        reply = calls.recv()
    except (EOFError, OSError) as exc:
        _kill(process)
        raise CollectorError(f"the ingest process did not start ({_ended_text(process)})") from exc
    if reply[0] != "ready":
        process.wait(10)
        raise CollectorError(str(reply[1]))
    _, endpoint, path = reply
    return endpoint, Path(path) if path else None


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(5.0)


def _ended_text(process: subprocess.Popen[bytes]) -> str:
    code = process.poll()
    if code is None:
        return "still running, not answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == 0:
        return CLOSED_ITSELF
    return f"exit code {code}"
