"""The window's side of the ingest process: start it, ask it for frames without ever waiting on the GUI thread,
and stand-ins for the objects the window used in-process (``RemoteRuns``, ``RemoteStore``, ``RemoteRecorder``,
``RemoteCollector``, ``RemoteWatcher``) so the views do not know where the data lives.

Frames are pipelined: a request is always in flight; a frame tick takes the reply that arrived since the last tick
(built by the ingest process meanwhile, on its own core) and sends the next request, so the GUI thread never waits
for a snapshot to be built. Only the first frame of a run, and ``snapshot(now_s=...)`` (tests), wait for one.

What it must never do: import Qt, raise into a frame tick when the ingest process died (``failure`` says why and the
last frame stays on screen), or block the GUI thread on a call longer than ``CALL_TIMEOUT_S``.
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
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import numpy as np

import ringscope
from ringscope.agent.schema import Event
from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.analysis.runs import LaunchOutcome
from ringscope.gui.core.ingest.collector import CollectorError
from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.runs import RunRow
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.live.watch import HangNotice
from ringscope.gui.core.service.frames import FrameDecoder, FrameError
from ringscope.gui.core.service.server import IngestSetup
from ringscope.gui.core.session_data import SessionData

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final[float] = 60.0
"""How long the window waits for the ingest process to bind (imports take ~1 s; a loaded machine more)."""
CALL_TIMEOUT_S: Final[float] = 30.0
FIRST_FRAME_WAIT_S: Final[float] = 5.0
"""A run's first frame is waited for (so a newly shown run is never drawn empty); later ones never are."""
CLOSE_TIMEOUT_S: Final[float] = 20.0


class IngestError(RuntimeError):
    """The ingest process is gone, or refused a call; the message says which and why."""


class IngestProcess:
    """Starts ``python -m ringscope.gui.core.service.server`` and talks to it over two socket pairs (frames, calls)."""

    def __init__(self, setup: IngestSetup) -> None:
        self.setup = setup
        self.endpoint = ""
        self.recording_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._calls: Connection | None = None
        self._calls_lock = threading.Lock()
        self.frames: FrameChannel | None = None
        self._closing = False
        self._failure: str | None = None
        self.price: Callable[[], float | None] | None = None  # the window's price per device-hour (metrics)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> IngestProcess:
        """Start the process and wait until it listens. Raises ``CollectorError`` with the reason it could not."""
        frames_here, frames_there = socket.socketpair()
        calls_here, calls_there = socket.socketpair()
        fds = (frames_there.fileno(), calls_there.fileno())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ringscope.child_pythonpath(), env.get("PYTHONPATH")) if p)
        try:
            self._process = subprocess.Popen([sys.executable, "-m", "ringscope.gui.core.service.server", *map(str,
                                                                                                              fds)],
                                             pass_fds=fds, stdin=subprocess.DEVNULL, env=env)
        finally:
            frames_there.close()
            calls_there.close()
        self._calls = Connection(calls_here.detach())
        self.frames = FrameChannel(Connection(frames_here.detach()), self)
        self._calls.send(self.setup)
        deadline = time.monotonic() + timeout_s
        while not self._calls.poll(0.1):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise CollectorError(f"the ingest process did not start ({self._ended_text()}); its error is above "
                                     "in the terminal")
        try:
            reply = self._calls.recv()
        except (EOFError, OSError) as exc:
            self._kill()
            raise CollectorError(f"the ingest process did not start ({self._ended_text()})") from exc
        if reply[0] != "ready":
            self._process.wait(10)
            raise CollectorError(str(reply[1]))
        _, self.endpoint, path = reply
        self.recording_path = Path(path) if path else None
        return self

    @property
    def pid(self) -> int | None:
        """The ingest process's pid (None before start)."""
        return self._process.pid if self._process is not None else None

    @property
    def failure(self) -> str | None:
        """Why the ingest process is gone when it ended without being closed (None while it runs)."""
        if self._failure is None and not self._closing and self._process is not None \
                and self._process.poll() is not None:
            self._failure = f"the ingest process ended unexpectedly ({self._ended_text()})"
        return self._failure

    def note_failure(self, text: str) -> None:
        """A channel broke: remember why (the process's own exit status wins when it has one)."""
        if self._closing:
            return
        if self._process is not None:
            try:
                self._process.wait(2.0)
            except subprocess.TimeoutExpired:
                pass
        if self._failure is None:
            self._failure = (f"the ingest process ended unexpectedly ({self._ended_text()})"
                             if self._process is not None and self._process.poll() is not None else text)

    def call(self, target: str, method: str, *args: Any) -> Any:
        """One call (``server.ALLOWED``); raises ``IngestError`` when the process is gone or the call failed."""
        if self._calls is None:
            raise IngestError("the ingest process is not started")
        with self._calls_lock:
            if self.failure is not None:
                raise IngestError(self.failure)
            try:
                self._calls.send((target, method, args))
                if not self._calls.poll(CALL_TIMEOUT_S):
                    raise IngestError(f"the ingest process did not answer {target}.{method} in {CALL_TIMEOUT_S:.0f} s")
                kind, value = self._calls.recv()
            except (EOFError, OSError) as exc:
                self.note_failure(f"the ingest process is gone ({exc or type(exc).__name__})")
                raise IngestError(self.failure or "the ingest process is gone") from exc
        if kind != "ok":
            raise IngestError(f"{target}.{method}: {value}")
        return value

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> dict[str, Any]:
        """Close the collector, then the recording (every record written), and end the process. Returns its
        closing figures (empty when it was gone already)."""
        self._closing = True
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
                self._kill()
        for connection in (self._calls, self.frames.connection if self.frames is not None else None):
            if connection is not None:
                connection.close()
        return figures

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5.0)

    def _ended_text(self) -> str:
        code = self._process.poll() if self._process is not None else None
        if code is None:
            return "still running, not answering"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


class FrameChannel:
    """The frames socket (GUI thread only): one request in flight, replies taken when they are there."""

    def __init__(self, connection: Connection, owner: IngestProcess) -> None:
        self.connection = connection
        self._owner = owner
        self._decoder = FrameDecoder()
        self._run_id: str | None = None  # the run whose frames are wanted
        self._pending: str | bool | None = False  # False: nothing in flight, else the run id asked for
        self.snapshot: Snapshot | None = None
        self.held = True  # False when the ingest process says the wanted run is not held
        self.rows_version = -1
        self.rows: list[RunRow] = []
        self.run_ids: list[str] = []
        self.hang: HangVerdict | None = None
        self.notices: list[HangNotice] = []
        self.recorder: dict[str, Any] = {}
        self.heat_columns = 0
        self.build_s: tuple[float, float] = (0.0, 0.0)  # the last frame's build in the ingest process: wall, CPU
        self.error: str | None = None

    def want(self, run_id: str | None) -> None:
        """Ask for ``run_id``'s frames from now on (forgets what was held of another run)."""
        if run_id != self._run_id:
            self._run_id = run_id
            self._decoder.forget()
            self.snapshot, self.held, self.hang = None, True, None

    def pump(self, *, wait_s: float = 0.0) -> bool:
        """Take the reply if it arrived (waiting up to ``wait_s``) and send the next request. False once the
        ingest process is gone."""
        if self._owner.failure is not None:
            return False
        try:
            if self._pending is not False and self.connection.poll(wait_s):
                self._take(self.connection.recv())
            if self._pending is False:
                self.connection.send(("frame", self._run_id, self._decoder.base, self.rows_version,
                                      self._owner_price()))
                self._pending = self._run_id
        except (EOFError, OSError) as exc:
            self._owner.note_failure(f"the ingest process is gone ({exc or type(exc).__name__})")
            return False
        return True

    def latest(self, run_id: str | None, *, fresh: bool = False) -> Snapshot | None:
        """The newest frame of ``run_id``: without waiting, except for a run's first frame or when ``fresh``
        (then a frame built after this call)."""
        self.want(run_id)
        if fresh:
            if self._pending is not False:
                self.pump(wait_s=CALL_TIMEOUT_S)  # the reply to a request sent before now: not fresh
            self.pump()
            self.pump(wait_s=CALL_TIMEOUT_S)
            return self.snapshot
        self.pump()
        if self.snapshot is None and self.held:
            deadline = time.monotonic() + FIRST_FRAME_WAIT_S
            while self.snapshot is None and self.held and time.monotonic() < deadline:
                if not self.pump(wait_s=max(0.0, deadline - time.monotonic())):
                    break
        return self.snapshot

    def _take(self, reply: dict[str, Any]) -> None:
        asked, self._pending = self._pending, False
        if "rows" in reply:
            self.rows_version, self.rows, self.run_ids = reply["rows"]
        self.notices.extend(reply.get("notices", ()))
        self.recorder = reply.get("recorder", self.recorder)
        self.error = reply.get("error")
        if asked != self._run_id:
            return  # a frame of the run shown before
        self.hang = reply.get("hang")
        frame = reply.get("frame")
        self.held = frame is not None or self._run_id is None
        if frame is None:
            return
        try:
            self.snapshot = self._decoder.decode(frame)
            self.heat_columns = int(reply.get("heat_columns", 0))
            self.build_s = reply.get("build_s", self.build_s)
        except FrameError as exc:  # never expected: start over with a whole frame
            log.warning("%s; asking for a whole frame", exc)
            self._decoder.forget()

    def _owner_price(self) -> float | None:
        price = getattr(self._owner, "price", None)
        return price() if callable(price) else None


class RemoteStore:
    """Stands in for a run's ``LiveStore`` in the window: frames come from the ingest process."""

    def __init__(self, process: IngestProcess, run_id: str, lost_timeout_s: float) -> None:
        self._process = process
        self.run_id = run_id
        self._lost_timeout_s = lost_timeout_s
        self._empty: LiveStore | None = None

    @property
    def lost_timeout_s(self) -> float:
        return self._lost_timeout_s

    @lost_timeout_s.setter
    def lost_timeout_s(self, value: float) -> None:
        self._lost_timeout_s = float(value)
        _quietly(self._process, "store", "set_lost_timeout_s", self.run_id, float(value))

    def snapshot(self, now_s: float | None = None) -> Snapshot:
        """The newest frame (``now_s`` given: one built after this call, as tests want)."""
        channel = self._process.frames
        snap = channel.latest(self.run_id, fresh=now_s is not None) if channel is not None else None
        if snap is None:  # not held (any more), or the ingest process is gone before a first frame
            if self._empty is None:
                self._empty = LiveStore(run_id=self.run_id)
            return self._empty.snapshot(now_s)
        return snap

    def recent_snapshot(self, now_s: float | None = None, max_age_s: float = 1.0) -> Snapshot:
        """The newest frame (it is at most one frame interval old)."""
        return self.snapshot()

    @property
    def version(self) -> int:
        """The version of the newest frame (-1 before one)."""
        channel = self._process.frames
        return channel.snapshot.version if channel is not None and channel.snapshot is not None else -1

    def to_session_data(self) -> SessionData:
        """The run's recent steps, devices and events (from the ingest process; empty when it is gone)."""
        try:
            data: SessionData = self._process.call("store", "to_session_data", self.run_id)
        except IngestError as exc:
            log.debug("%s", exc)
            return SessionData()
        return data

    def step_end_times(self, since: int, until: int | None = None) -> tuple[np.ndarray, int]:
        """``end_s`` of the steps ingested after the first ``since`` (``LiveStore.step_end_times``)."""
        result: tuple[np.ndarray, int] = self._process.call("store", "step_end_times", self.run_id, since, until)
        return result


class RemoteRuns:
    """Stands in for ``LiveRuns`` in the window. Rows and run ids come with the frames (never waited for after the
    first); the rare calls go to the ingest process."""

    def __init__(self, process: IngestProcess, lost_timeout_s: float) -> None:
        self._process = process
        self._lost_timeout_s = lost_timeout_s
        self._stores: dict[str, RemoteStore] = {}

    @property
    def failure(self) -> str | None:
        """Why the ingest process is gone (None while it runs)."""
        return self._process.failure

    @property
    def lost_timeout_s(self) -> float:
        return self._lost_timeout_s

    @lost_timeout_s.setter
    def lost_timeout_s(self, value: float) -> None:
        self._lost_timeout_s = float(value)
        _quietly(self._process, "runs", "set_lost_timeout_s", float(value))

    @property
    def hang_minimum_s(self) -> float:
        """How long without a step makes a run hung (``LiveRuns.hang_minimum_s``)."""
        return float(_quietly(self._process, "runs", "get_hang_minimum_s") or 0.0)

    @hang_minimum_s.setter
    def hang_minimum_s(self, value: float) -> None:
        _quietly(self._process, "runs", "set_hang_minimum_s", float(value))

    def rows(self, now_s: float | None = None, *, refresh: bool = True) -> list[RunRow]:
        """The runs table as of the newest reply (states decided by the ingest process's watcher).
        ``refresh=False``: the reply the watcher's ``tick`` just took, so its hangs and these rows agree."""
        channel = self._channel()
        if channel is None:
            return []
        if refresh:
            channel.pump()
        if channel.rows_version < 0:  # the first rows: wait for them, so the table is never empty for nothing
            deadline = time.monotonic() + FIRST_FRAME_WAIT_S
            while channel.rows_version < 0 and time.monotonic() < deadline and channel.pump(wait_s=0.05):
                pass
        return list(channel.rows)

    def run_ids(self) -> list[str]:
        """Runs held in memory, as of the newest reply."""
        channel = self._channel()
        return list(channel.run_ids) if channel is not None else []

    def latest_run_id(self) -> str | None:
        """The run that started last (as ``LiveRuns.latest_run_id``)."""
        rows = self.rows()
        return rows[-1].run_id if rows else None

    def store(self, run_id: str) -> RemoteStore | None:
        """The run's stand-in store, when the ingest process holds the run."""
        if run_id not in self.run_ids():
            return None
        store = self._stores.get(run_id)
        if store is None:
            store = self._stores[run_id] = RemoteStore(self._process, run_id, self._lost_timeout_s)
        return store

    def refresh(self, now_s: float | None = None) -> list[tuple[str, str, str]]:
        """Run states are decided by the ingest process's watcher; this only takes the newest rows."""
        self.rows()
        return []

    def hang(self, run_id: str) -> HangVerdict | None:
        """The shown run's hang verdict comes with its frames; another run's is asked for."""
        channel = self._channel()
        if channel is not None and channel._run_id == run_id and channel.snapshot is not None:
            return channel.hang
        result: HangVerdict | None = _quietly(self._process, "runs", "hang", run_id)
        return result

    def agent_of_rank(self, run_id: str, rank: int) -> str | None:
        result: str | None = _quietly(self._process, "runs", "agent_of_rank", run_id, rank)
        return result

    def priced_until(self, run_id: str) -> float | None:
        result: float | None = _quietly(self._process, "runs", "priced_until", run_id)
        return result

    def note_launch(self, run_id: str, outcome: LaunchOutcome) -> None:
        _quietly(self._process, "runs", "note_launch", run_id, outcome)

    def note_stop_requested(self, run_id: str | None) -> None:
        _quietly(self._process, "runs", "note_stop_requested", run_id)

    def _channel(self) -> FrameChannel | None:
        return self._process.frames


class RemoteRecorder:
    """Stands in for the ``Recorder``: its figures come with the frames; it is closed by the ingest process."""

    def __init__(self, process: IngestProcess, path: Path) -> None:
        self._process = process
        self.path = path

    def _figure(self, name: str) -> Any:
        channel = self._process.frames
        return channel.recorder.get(name) if channel is not None else None

    @property
    def file_bytes(self) -> int:
        value = self._figure("file_bytes")
        return int(value) if value is not None else self.path.stat().st_size

    @property
    def write_errors(self) -> int:
        return int(self._figure("write_errors") or 0)

    @property
    def rows_written(self) -> int:
        """Rows the recorder committed to the file, as of the newest frame."""
        return int(self._figure("rows_written") or 0)

    @property
    def dropped_records(self) -> int:
        """Records the recorder could not queue, as of the newest frame."""
        return int(self._figure("dropped_records") or 0)

    @property
    def last_write_error(self) -> str | None:
        value: str | None = self._figure("last_write_error")
        return value

    def note_launch(self, run_id: str, state: str, exit_code: int | None, ts_s: float, detail: str = "") -> None:
        _quietly(self._process, "recorder", "note_launch", run_id, state, exit_code, ts_s, detail)

    def note_event(self, agent_id: str, event: Event) -> None:
        _quietly(self._process, "recorder", "note_event", agent_id, event)

    def close(self) -> None:
        """The ingest process closes the recording when it is closed (``IngestProcess.close``)."""


class RemoteCollector:
    """Stands in for the ``Collector``: its endpoint, and its counters on demand."""

    def __init__(self, process: IngestProcess) -> None:
        self._process = process
        self.endpoint = process.endpoint

    @property
    def counters(self) -> IngestCounters:
        """The collector's counters (zeros when the ingest process is gone)."""
        result: IngestCounters | None = _quietly(self._process, "collector", "counters")
        return result if result is not None else IngestCounters()

    def close(self) -> None:
        """The ingest process closes the collector when it is closed (``IngestProcess.close``)."""


class RemoteWatcher:
    """Stands in for the ``RunWatcher``: the ingest process watches; ``tick`` hands over the hangs it found."""

    def __init__(self, process: IngestProcess) -> None:
        self._process = process

    def tick(self, now_s: float | None = None) -> list[HangNotice]:
        channel = self._process.frames
        if channel is None:
            return []
        channel.pump()
        notices, channel.notices = channel.notices, []
        return notices


def _quietly(process: IngestProcess, target: str, method: str, *args: Any) -> Any:
    """A call whose failure the window survives: logged, None returned (the failure notice says why)."""
    try:
        return process.call(target, method, *args)
    except IngestError as exc:
        log.warning("%s", exc)
        return None
