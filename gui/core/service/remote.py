"""Stand-ins for the objects the window used in-process (``RemoteRuns``, ``RemoteStore``, ``RemoteRecorder``,
``RemoteCollector``, ``RemoteWatcher``), so the views do not know that the data lives in the ingest process.

What they read often (frames, rows, run ids, hang notices, the recorder's figures) comes with the frames
(``ringscope.gui.core.service.frame_channel``); the rare calls are forwarded by two descriptors, ``RemoteMethod``
and ``RemoteSetting``, each checked against the one declaration of what the window may use
(``ringscope.gui.core.service.calls.EXPOSED``) when its class is made.

What it must never do: import Qt, or raise into the window when the ingest process is gone (a forwarded call is
logged and answers None; ``failure`` says why).
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.device_series import SESSION_GPU_READINGS
from ringscope.gui.core.live.run_rows import RunRow
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.live.store import SESSION_STEPS, LiveStore
from ringscope.gui.core.live.watch import HangNotice
from ringscope.gui.core.service.calls import Kind, exposed
from ringscope.gui.core.service.frame_channel import FIRST_FRAME_WAIT_S, FrameChannel
from ringscope.gui.core.service.process import IngestError, IngestProcess
from ringscope.gui.core.session_data import SessionData

log = logging.getLogger(__name__)


class _StandIn:
    """What the forwarding descriptors need of a stand-in: the process, the target its calls name, the arguments
    every call starts with (a store's run id) and the settings kept here as the window set them."""

    target: ClassVar[str]

    def __init__(self, process: IngestProcess, **kept: float) -> None:
        self._process = process
        self._kept: dict[str, float] = dict(kept)

    def _leading(self) -> tuple[Any, ...]:
        return ()


class _Forwarded:
    """A stand-in's attribute forwarded to the ingest process: its name must be declared in ``calls.EXPOSED`` as
    this kind for the stand-in's target (checked when the stand-in's class is made)."""

    kind: ClassVar[Kind]

    def __set_name__(self, owner: type[_StandIn], name: str) -> None:
        if exposed(owner.target, name).kind != self.kind:
            raise TypeError(f"{owner.target}.{name} is not a {self.kind} in calls.EXPOSED")
        self.name = name


class RemoteMethod(_Forwarded):
    """A method of the ingest process's ``target`` object, called there (``IngestProcess.call_quietly``: None when
    the process is gone)."""

    kind = "method"

    def __get__(self, stand_in: _StandIn | None, owner: type[_StandIn] | None = None) -> Any:
        if stand_in is None:
            return self
        return functools.partial(stand_in._process.call_quietly, stand_in.target, self.name, *stand_in._leading())


class RemoteSetting(_Forwarded):
    """A number setting of the ingest process's ``target`` object: set there (and given again to a process that
    replaces a crashed one, as ``calls.EXPOSED`` says). ``kept``: read back as the window set it, without asking."""

    kind = "setting"

    def __init__(self, *, kept: bool = False) -> None:
        self.kept = kept

    def __get__(self, stand_in: _StandIn | None, owner: type[_StandIn] | None = None) -> Any:
        if stand_in is None:
            return self
        if self.kept:
            return stand_in._kept[self.name]
        return float(stand_in._process.call_quietly(stand_in.target, self.name, *stand_in._leading()) or 0.0)

    def __set__(self, stand_in: _StandIn, value: float) -> None:
        if self.kept:
            stand_in._kept[self.name] = float(value)
        stand_in._process.call_quietly(stand_in.target, self.name, *stand_in._leading(), float(value))


class RemoteStore(_StandIn):
    """Stands in for a run's ``LiveStore`` in the window: frames come from the ingest process. Its
    ``lost_timeout_s`` is the window's to read: the process's stores follow the runs' setting
    (``RemoteRuns.lost_timeout_s``)."""

    target = "store"

    def __init__(self, process: IngestProcess, run_id: str, lost_timeout_s: float) -> None:
        super().__init__(process)
        self.run_id = run_id
        self.lost_timeout_s = lost_timeout_s
        self._empty: LiveStore | None = None

    def _leading(self) -> tuple[Any, ...]:
        return (self.run_id,)

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

    def to_session_data(self, budget: int = SESSION_STEPS, gpu_budget: int = SESSION_GPU_READINGS,
                        least: int | None = None) -> SessionData:
        """The run's recent steps, devices and events (from the ingest process; empty when it is gone), as
        ``LiveStore.to_session_data`` with the same arguments."""
        try:
            data: SessionData = self._process.call("store", "to_session_data", self.run_id, budget, gpu_budget, least)
        except IngestError as exc:
            log.debug("%s", exc)
            return SessionData()
        return data

    def step_end_times(self, since: int, until: int | None = None) -> tuple[np.ndarray, int]:
        """``end_s`` of the steps ingested after the first ``since`` (``LiveStore.step_end_times``)."""
        result: tuple[np.ndarray, int] = self._process.call("store", "step_end_times", self.run_id, since, until)
        return result


class RemoteRuns(_StandIn):
    """Stands in for ``LiveRuns`` in the window. Rows and run ids come with the frames (never waited for after the
    first); the rare calls go to the ingest process."""

    target = "runs"
    lost_timeout_s = RemoteSetting(kept=True)
    hang_minimum_s = RemoteSetting()  # how long without a step makes a run hung (``LiveRuns.hang_minimum_s``)
    agent_of_rank = RemoteMethod()
    priced_until = RemoteMethod()
    note_launch = RemoteMethod()
    note_stop_requested = RemoteMethod()

    def __init__(self, process: IngestProcess, lost_timeout_s: float) -> None:
        super().__init__(process, lost_timeout_s=float(lost_timeout_s))
        self._stores: dict[str, RemoteStore] = {}

    @property
    def failure(self) -> str | None:
        """Why the ingest process is gone (None while it runs)."""
        return self._process.failure

    @property
    def restarted(self) -> tuple[int, str] | None:
        """(restarts so far, what to tell the user about the latest) once the ingest process was replaced."""
        return self._process.restarted

    def rows(self, now_s: float | None = None, *, refresh: bool = True) -> list[RunRow]:
        """The runs table as of the newest reply (states decided by the ingest process's watcher).
        ``refresh=False``: the reply the watcher's ``tick`` just took, so its hangs and these rows agree."""
        channel = self.frames_channel()
        if channel is None:
            return []
        if refresh:
            channel.pump()
        if channel.rows_version < 0:  # the first rows: wait for them, so the table is never empty for nothing
            deadline = time.monotonic() + FIRST_FRAME_WAIT_S
            while (channel.rows_version < 0 and time.monotonic() < deadline
                   and channel.pump(wait_s=0.05, paced=False)):
                pass
        return list(channel.rows)

    def run_ids(self) -> list[str]:
        """Runs held in memory, as of the newest reply."""
        channel = self.frames_channel()
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
            store = self._stores[run_id] = RemoteStore(self._process, run_id, self.lost_timeout_s)
        return store

    def refresh(self, now_s: float | None = None) -> list[tuple[str, str, str]]:
        """Run states are decided by the ingest process's watcher; this only takes the newest rows."""
        self.rows()
        return []

    def hang(self, run_id: str) -> HangVerdict | None:
        """The shown run's hang verdict comes with its frames; another run's is asked for."""
        channel = self.frames_channel()
        if channel is not None and channel._run_id == run_id and channel.snapshot is not None:
            return channel.hang
        result: HangVerdict | None = self._process.call_quietly("runs", "hang", run_id)
        return result

    def frames_channel(self) -> FrameChannel | None:
        """The frames channel (the window watches its socket, to draw a frame when it arrives); None before the
        ingest process has started."""
        return self._process.frames


class RemoteRecorder(_StandIn):
    """Stands in for the ``Recorder``: its figures come with the frames; it is closed by the ingest process."""

    target = "recorder"
    note_launch = RemoteMethod()  # (run_id, state, exit_code, ts_s, detail="")
    note_event = RemoteMethod()  # (agent_id, event)

    def __init__(self, process: IngestProcess, path: Path) -> None:
        super().__init__(process)
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

    def close(self) -> None:
        """The ingest process closes the recording when it is closed (``IngestProcess.close``)."""


class RemoteCollector(_StandIn):
    """Stands in for the ``Collector``: its endpoint, and its counters on demand."""

    target = "collector"

    def __init__(self, process: IngestProcess) -> None:
        super().__init__(process)
        self.endpoint = process.endpoint

    @property
    def counters(self) -> IngestCounters:
        """The collector's counters (zeros when the ingest process is gone)."""
        result: IngestCounters | None = self._process.call_quietly("collector", "counters")
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
