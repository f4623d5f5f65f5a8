"""Profiles on demand: the framework's own profiler around a rank's next N steps, asked for remotely.

The framework's part is a ``ProfilerBackend``: ``ringscope.agent.torch_ddp.profiling`` (``torch.profiler`` / Kineto,
a Chrome trace and the top operators) and ``ringscope.agent.tf_distribute.profiling`` (TensorFlow's profiler, its
output in TensorBoard's layout). This module is framework-free.

A collector's ``profile`` request reaches the agent's sender thread, which only leaves a note here (``request``).
The training thread sees the note at its next step end (``at_step_end``: one attribute read while nothing is
asked) and starts the profiler there; N step ends later it stops it. Exporting the Chrome trace and summing the
top operators happen on a thread of their own, never the training thread, and the answer (trace path, top ops)
goes back as an ``Event`` of kind ``profile``, so it is recorded too.

The training pays for the profiler during those N steps only (and the profiler's one-time start-up at the first,
~1 s for Kineto on CPU). Traces are written on the rank's host, under ``RINGSCOPE_PROFILE_DIR`` (default: the temp
folder's ``ringscope-profiles``); ``ringscope profile`` merges the ranks' Chrome traces it can read into one trace.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final, Protocol

from ringscope.agent.schema import EventKind

log = logging.getLogger(__name__)

ENV_PROFILE_DIR: Final = "RINGSCOPE_PROFILE_DIR"
TOP_OPS: Final[int] = 15
"""Operators listed per rank in the answer (by self time)."""


def profile_dir() -> Path:
    """Where this host's ranks write their traces."""
    return Path(os.environ.get(ENV_PROFILE_DIR) or Path(tempfile.gettempdir()) / "ringscope-profiles")


class ProfilerBackend(Protocol):
    """A framework's profiler: ``start`` and ``stop`` on the training thread, ``export`` on a thread of its own."""

    framework: str

    def start(self) -> Any:
        """Start profiling now; returns a handle (raise to refuse: the error goes back to whoever asked)."""

    def stop(self, handle: Any) -> None:
        """Stop the profiling ``handle`` started."""

    def export(self, handle: Any, folder: Path, rank: int) -> dict[str, Any]:
        """Write the trace under ``folder``; returns the answer's fields: ``trace``, ``format``, ``top_ops``..."""


class StepProfiler:
    """Profiles one rank's next N steps when asked (see the module docstring). ``agent``: the rank's ``Agent``."""

    def __init__(self, agent: Any, rank: int, backend: ProfilerBackend) -> None:
        self._agent = agent
        self._rank = rank
        self._backend = backend
        self.armed = False  # True from a request until its profile stopped: what the step end checks
        self.wanted: tuple[str, int] | None = None  # (request id, steps): written by the sender thread
        self._active: Any = None  # the running torch.profiler.profile
        self._request = ""
        self._left = 0
        self._first_step = 0
        self._started_s = 0.0

    def request(self, request_id: str, steps: int) -> None:
        """A collector asks for ``steps`` profiled steps (sender thread)."""
        if self._active is not None or self.wanted is not None:
            raise RuntimeError("a profile of this rank is already being taken")
        self.wanted = (request_id, steps)
        self.armed = True

    def at_step_end(self, step: int) -> None:
        """A step ended on the training thread (``step``: the next step's number)."""
        if self._active is not None:
            self._left -= 1
            if self._left <= 0:
                self._stop(step)
        elif self.wanted is not None:
            self._start(step)

    def _start(self, step: int) -> None:
        request_id, steps = self.wanted  # type: ignore[misc]
        self.wanted = None
        try:
            profiler = self._backend.start()
        except Exception as exc:  # the training goes on; whoever asked learns why
            self.armed = False
            self._answer(request_id, {"error": f"the profiler could not start: {type(exc).__name__}: {exc}"})
            return
        self._active, self._request, self._left, self._first_step = profiler, request_id, steps, step
        self._started_s = time.time()

    def _stop(self, step: int) -> None:
        profiler, request_id = self._active, self._request
        self._active = None
        self.armed = False
        try:
            self._backend.stop(profiler)
        except Exception as exc:
            self._answer(request_id, {"error": f"the profiler could not stop: {type(exc).__name__}: {exc}"})
            return
        steps = (self._first_step, step - 1)
        duration = time.time() - self._started_s
        threading.Thread(target=self._export, args=(profiler, request_id, steps, duration),
                         name="ringscope-profile-export", daemon=True).start()

    def _export(self, profiler: Any, request_id: str, steps: tuple[int, int], duration_s: float) -> None:
        try:
            folder = profile_dir() / request_id
            folder.mkdir(parents=True, exist_ok=True)
            fields = self._backend.export(profiler, folder, self._rank)
            self._answer(request_id, {**fields, "steps": list(steps), "duration_s": round(duration_s, 4)})
        except Exception as exc:
            log.warning("ringscope: exporting the profile failed: %s", exc)
            self._answer(request_id, {"error": f"exporting the trace failed: {type(exc).__name__}: {exc}"})

    def _answer(self, request_id: str, body: dict[str, Any]) -> None:
        identity = self._agent.identity
        text = json.dumps({"id": request_id, "host": identity.host, "pid": identity.pid,
                           "framework": self._backend.framework, **body})
        self._agent.event(EventKind.PROFILE, rank=self._rank, text=text)
