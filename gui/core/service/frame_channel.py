"""The window's frames channel to the ingest process: one request in flight, so a frame tick never waits.

A frame tick sends a request; the ingest process builds the frame on its own core, and the window takes the reply
when it arrives (it watches ``connection``: ``usable`` says when it may) or at its next tick, so the GUI thread never
waits for a snapshot to be built. ``pace_s`` keeps a reply taken on arrival from asking for the next frame at once:
the next request goes with the next tick. Only the first frame of a run, and ``latest(fresh=True)`` (tests), wait
for one. A reply also brings the runs table's rows, the run ids held, the hang notices and the recorder's figures.
When the ingest process is replaced after a crash, the channel follows the new one (``FrameSource.frames_link``).

What it must never do: import Qt, be used from any thread but the GUI thread, or raise into a frame tick when the
ingest process died (``FrameSource.failure`` says why, and the last frame stays).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Final, Protocol

from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.live.run_rows import RunRow
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.live.watch import HangNotice
from ringscope.gui.core.service.calls import CALL_TIMEOUT_S
from ringscope.gui.core.service.frames import FrameDecoder, FrameError

log = logging.getLogger(__name__)

FIRST_FRAME_WAIT_S: Final[float] = 5.0
"""A run's first frame is waited for (so a newly shown run is never drawn empty); later ones never are."""


class FrameSource(Protocol):
    """What the channel needs of the ingest process's handle (``ringscope.gui.core.service.process.IngestProcess``)."""

    price: Callable[[], float | None] | None

    @property
    def failure(self) -> str | None: ...

    @property
    def restarting(self) -> str | None: ...

    @property
    def frames_link(self) -> tuple[int, Connection] | None: ...

    def note_failure(self, text: str, generation: int | None = None) -> None: ...


class FrameChannel:
    """The frames socket (GUI thread only): one request in flight, replies taken when they are there."""

    def __init__(self, connection: Connection, owner: FrameSource) -> None:
        self.connection = connection
        self._owner = owner
        self._generation = 0  # of the process ``connection`` leads to (``IngestProcess.frames_link``)
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
        self.pace_s = 0.0  # the least time from one request to the next (the window's frame interval, about)
        self._sent_at = -math.inf
        self._broken = False  # the connection to the current process failed (its supervisor decides what next)

    @property
    def usable(self) -> bool:
        """Whether ``connection`` may be watched for replies: its process runs and it is not broken (a broken or
        closed one is readable for ever, which would wake a watcher in a loop)."""
        return self._owner.failure is None and self._owner.restarting is None and not self._broken

    def want(self, run_id: str | None) -> None:
        """Ask for ``run_id``'s frames from now on (forgets what was held of another run)."""
        if run_id != self._run_id:
            self._run_id = run_id
            self._decoder.forget()
            self.snapshot, self.held, self.hang = None, True, None

    def pump(self, *, wait_s: float = 0.0, paced: bool = True) -> bool:
        """Take the reply if it arrived (waiting up to ``wait_s``) and send the next request (``paced``: not
        before ``pace_s`` after the last one). False once the ingest process is gone, and while a new one is
        started in its place."""
        if self._owner.failure is not None or self._owner.restarting is not None:
            return False
        self._follow()
        if self._broken:
            return False
        try:
            if self._pending is not False and self.connection.poll(wait_s):
                self._take(self.connection.recv())
            now = time.monotonic()
            if self._pending is False and (not paced or now - self._sent_at >= self.pace_s):
                self.connection.send(("frame", self._run_id, self._decoder.base, self.rows_version,
                                      self._owner_price()))
                self._pending, self._sent_at = self._run_id, now
        except (EOFError, OSError) as exc:
            self._broken = True
            self._owner.note_failure(f"the ingest process is gone ({exc or type(exc).__name__})", self._generation)
            return False
        return True

    def _follow(self) -> None:
        """Switch to the frames of a process started in place of a crashed one: it holds no frame of ours (the
        next comes whole) and its rows are new; what is on screen stays until they arrive."""
        link = self._owner.frames_link
        if link is None or link[0] == self._generation:
            return
        old, (self._generation, self.connection) = self.connection, link
        old.close()  # here, not by the supervisor: this thread may be using it
        self._decoder.forget()
        self._pending, self.rows_version, self._broken = False, -1, False

    def latest(self, run_id: str | None, *, fresh: bool = False) -> Snapshot | None:
        """The newest frame of ``run_id``: without waiting, except for a run's first frame or when ``fresh``
        (then a frame built after this call)."""
        self.want(run_id)
        if fresh:
            if self._pending is not False:
                self.pump(wait_s=CALL_TIMEOUT_S)  # the reply to a request sent before now: not fresh
            self.pump(paced=False)
            self.pump(wait_s=CALL_TIMEOUT_S)
            return self.snapshot
        self.pump()
        if self.snapshot is None and self.held:
            deadline = time.monotonic() + FIRST_FRAME_WAIT_S
            while self.snapshot is None and self.held and time.monotonic() < deadline:
                if not self.pump(wait_s=max(0.0, deadline - time.monotonic()), paced=False):
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
        price = self._owner.price
        return price() if callable(price) else None
