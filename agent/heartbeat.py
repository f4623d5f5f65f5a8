"""Heartbeats: where each rank of this process is right now, sent about once a second from the agent's own thread.

The training thread only writes where it is (``Position.enter``: three attribute stores, no lock, no I/O, no
allocation beyond the call); the heartbeat thread reads those positions once per interval and sends a
``Heartbeat`` record per rank, so the collector knows where every rank is even when no step completes. When a rank
has been in the same phase for ``stack_after_s`` (a hang, or a very long step), the beat carries the Python stack of
the thread that last marked the position, captured here with ``sys._current_frames`` — no signal, no ptrace, nothing
done on the training thread — the way ``py-spy dump`` would show it.

What it must never do: block or raise into the training thread, take a lock the training thread takes, or capture
stacks while a rank progresses (they cost ~0.1 ms per thread; a progressing rank never pays it).
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from types import FrameType
from typing import Any, Final

from ringscope.agent.background import BackgroundThread
from ringscope.agent.schema import MAX_TEXT_CHARS, Heartbeat, Record

log = logging.getLogger(__name__)

INTERVAL_S: Final[float] = 1.0
STACK_AFTER_S: Final[float] = 5.0
"""A rank in one phase for this long gets its stack sent (refreshed every ``STACK_REFRESH_S`` while it stays)."""
STACK_REFRESH_S: Final[float] = 10.0

DATA_WAIT: Final = "data_wait"
COMPUTE: Final = "compute"
COLLECTIVE: Final = "collective"
CHECKPOINT: Final = "checkpoint"
IDLE: Final = "idle"  # between steps (or before the first)


class Position:
    """Where one rank is: the phase it entered, when, at which step (and gradient bucket, in a collective).

    Written by the training thread (``enter``), read by the heartbeat thread. Attribute stores are atomic under the
    GIL; a reader may see a phase with the previous ``since_s`` for an instant, which a 1 Hz heartbeat cannot tell.
    """

    __slots__ = ("bucket", "phase", "rank", "since_s", "step", "thread_id")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.phase = IDLE
        self.since_s = time.time()
        self.step: int | None = None
        self.bucket: int | None = None
        self.thread_id: int | None = None

    def enter(self, phase: str, step: int | None = None, bucket: int | None = None) -> None:
        """The rank enters ``phase`` now (training thread: a few attribute stores)."""
        self.phase = phase
        self.since_s = time.time()
        if step is not None:
            self.step = step
        self.bucket = bucket
        self.thread_id = threading.get_ident()


class HeartbeatThread(BackgroundThread):
    """Sends one ``Heartbeat`` per position every ``interval_s`` through ``put`` (the publisher's queue)."""

    def __init__(self, positions: Sequence[Position], put: Callable[[Record], object], *,
                 interval_s: float = INTERVAL_S, stack_after_s: float = STACK_AFTER_S) -> None:
        super().__init__("ringscope-heartbeat")
        self._positions = tuple(positions)
        self._put = put
        self._interval_s = interval_s
        self._stack_after_s = stack_after_s
        self._last_stack: dict[int, tuple[float, float]] = {}  # rank -> (since_s it was taken for, when)
        self._dump_requested = False

    @property
    def stack_after_s(self) -> float:
        return self._stack_after_s

    def set_stack_after(self, seconds: float) -> None:
        """A rank in one phase this long gets its stack sent (a runtime setting; any thread)."""
        if seconds <= 0:
            raise ValueError(f"the stack threshold must be > 0 s, got {seconds}")
        self._stack_after_s = seconds

    def request_stacks(self) -> None:
        """Send every rank's stack with the next beat (a dump on demand)."""
        self._dump_requested = True

    def beat(self, now_s: float | None = None) -> list[Heartbeat]:
        """Build (and send) one round of heartbeats now; returns them (the thread calls this every interval)."""
        now = time.time() if now_s is None else now_s
        dump, self._dump_requested = self._dump_requested, False
        states = [(position, position.phase, position.since_s, position.step, position.bucket, position.thread_id)
                  for position in self._positions]
        due = {thread for position, _, since, _, _, thread in states
               if thread is not None and (dump or self._stack_due(position.rank, since, now))}
        frames = thread_stacks(only=due) if due else {}  # one snapshot of the threads due, for this round
        beats = []
        for position, phase, since, step, bucket, thread in states:
            stack = None
            if thread in due:
                stack = _format_stack(frames.get(thread))
                self._last_stack[position.rank] = (since, now)
            beats.append(Heartbeat(now, position.rank, phase, since, step, bucket, stack))
        for record in beats:
            self._put(record)
        return beats

    def _stack_due(self, rank: int, since: float, now: float) -> bool:
        if now - since < self._stack_after_s:
            return False
        taken = self._last_stack.get(rank)
        return taken is None or taken[0] != since or now - taken[1] >= STACK_REFRESH_S

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.beat()
            except Exception:  # a heartbeat must never take anything down; say it once
                log.exception("ringscope: heartbeat failed; positions of this process are not reported")
                return


_SUSPENDABLE: Final[int] = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_STACK_TRIES: Final[int] = 5


def thread_stacks(only: Collection[int] | None = None) -> dict[int, list[FrameType]]:
    """Every Python thread's frames now (``only``: those threads'), outermost first, walked from this thread while
    the others run.

    A walk follows ``f_back`` one frame at a time and may lose the GIL between two: a generator that yields meanwhile
    has no caller any more (``f_back`` None), and the walk ends there, the thread's outer frames lost (seen as a
    training stack starting at the probe's loader generator). No live thread's outermost frame is a generator's,
    so such a stack is taken again, up to ``_STACK_TRIES`` times.
    """
    stacks: dict[int, list[FrameType]] = {}
    for _ in range(_STACK_TRIES):
        torn = False
        for ident, frame in sys._current_frames().items():
            if only is not None and ident not in only:
                continue
            known = stacks.get(ident)
            if known is not None and not _torn(known):
                continue
            chain: list[FrameType] = []
            walked: FrameType | None = frame
            while walked is not None:
                chain.append(walked)
                walked = walked.f_back
            chain.reverse()
            stacks[ident] = chain
            torn = torn or _torn(chain)
        if not torn:
            break
    return stacks


def _torn(chain: list[FrameType]) -> bool:
    return bool(chain) and bool(chain[0].f_code.co_flags & _SUSPENDABLE)


def _summary(chain: list[FrameType]) -> traceback.StackSummary:
    return traceback.StackSummary.extract((frame, frame.f_lineno) for frame in chain)


MAX_DUMP_FRAMES: Final[int] = 48
"""Innermost frames kept per thread in a dump on demand (a training loop's interesting part is near the top)."""


def dump_threads(training_thread: int | None, limit_chars: int = MAX_TEXT_CHARS - 512) -> list[dict[str, Any]]:
    """Every Python thread's stack now, the training thread first, as JSON-ready maps (read from this thread with
    ``sys._current_frames``: nothing runs on the others). Frames are ``[file, line, function, source line]``,
    outermost first; the whole fits ``limit_chars`` of JSON (frames, then whole threads, are cut from the far end,
    and ``cut`` says how many)."""
    names = {thread.ident: thread for thread in threading.enumerate()}
    threads: list[dict[str, Any]] = []
    for ident, chain in thread_stacks().items():
        thread = names.get(ident)
        full = _summary(chain)
        summary = full[-MAX_DUMP_FRAMES:]
        threads.append({
            "name": thread.name if thread is not None else f"thread {ident}",
            "ident": ident,
            "training": ident == training_thread,
            "daemon": bool(thread.daemon) if thread is not None else None,
            "frames": [[f.filename, f.lineno, f.name, (f.line or "")[:160]] for f in summary],
            "cut_frames": len(full) - len(summary),
        })
    # the training thread, then the user's threads, then ours (ringscope-*) and daemon threads
    threads.sort(key=lambda t: (not t["training"], str(t["name"]).startswith("ringscope"), bool(t["daemon"]),
                                str(t["name"])))
    kept: list[dict[str, Any]] = []
    used = 2
    cut_threads = 0
    for entry in threads:  # whole threads while they fit; the training thread always, cut from its outer end
        size = len(json.dumps(entry)) + 2
        if used + size > limit_chars and entry["training"]:
            while used + size > limit_chars and len(entry["frames"]) > 4:
                drop = max(1, len(entry["frames"]) // 4)
                entry["frames"] = entry["frames"][drop:]
                entry["cut_frames"] += drop
                size = len(json.dumps(entry)) + 2
        if used + size > limit_chars - 200:  # room for the note below
            cut_threads += 1
            continue
        kept.append(entry)
        used += size
    threads = kept
    if cut_threads:
        threads.append({"name": f"... {cut_threads} more thread(s) cut to fit one record", "ident": 0,
                        "training": False, "daemon": None, "frames": [], "cut_frames": 0})
    return threads


def _format_stack(chain: list[FrameType] | None) -> str | None:
    """The stack of one thread, innermost call last, cut to what a record may carry (keeping the innermost end)."""
    if chain is None:
        return None
    text = "".join(_summary(chain).format())
    if len(text) > MAX_TEXT_CHARS:
        text = "...[outer frames cut]\n" + text[-(MAX_TEXT_CHARS - 40):]
    return text
