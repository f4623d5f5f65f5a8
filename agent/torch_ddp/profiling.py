"""Profiles on demand for a PyTorch rank: ``torch.profiler`` (Kineto) around the next N steps, asked for remotely.

A collector's ``profile`` request reaches the agent's sender thread, which only leaves a note here (``request``).
The training thread sees the note at its next step end (``at_step_end``: one attribute read while nothing is
asked) and starts the profiler there; N step ends later it stops it. Exporting the Chrome trace and summing the
top operators happen on a thread of their own, never the training thread, and the answer (trace path, top ops)
goes back as an ``Event`` of kind ``profile``, so it is recorded too.

The training pays for the profiler during those N steps only (and Kineto's one-time start-up, ~1 s on CPU, at the
first). Traces are written on the rank's host, under ``RINGSCOPE_PROFILE_DIR`` (default: the temp folder's
``ringscope-profiles``); ``ringscope profile`` merges the ranks' traces it can read into one Chrome trace.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

from ringscope.agent.schema import EventKind

log = logging.getLogger(__name__)

ENV_PROFILE_DIR: Final = "RINGSCOPE_PROFILE_DIR"
TOP_OPS: Final[int] = 15
"""Operators listed per rank in the answer (by self time)."""


def profile_dir() -> Path:
    """Where this host's ranks write their traces."""
    return Path(os.environ.get(ENV_PROFILE_DIR) or Path(tempfile.gettempdir()) / "ringscope-profiles")


class StepProfiler:
    """Profiles one rank's next N steps when asked (see the module docstring). ``agent``: the rank's ``Agent``."""

    def __init__(self, agent: Any, rank: int, cuda: bool) -> None:
        self._agent = agent
        self._rank = rank
        self._cuda = cuda
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
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
            profiler = profile(activities=activities)
            profiler.start()
        except Exception as exc:  # the training goes on; whoever asked learns why
            self.armed = False
            self._answer(request_id, {"error": f"torch.profiler could not start: {type(exc).__name__}: {exc}"})
            return
        self._active, self._request, self._left, self._first_step = profiler, request_id, steps, step
        self._started_s = time.time()

    def _stop(self, step: int) -> None:
        profiler, request_id = self._active, self._request
        self._active = None
        self.armed = False
        try:
            profiler.stop()
        except Exception as exc:
            self._answer(request_id, {"error": f"torch.profiler could not stop: {type(exc).__name__}: {exc}"})
            return
        steps = (self._first_step, step - 1)
        duration = time.time() - self._started_s
        threading.Thread(target=self._export, args=(profiler, request_id, steps, duration),
                         name="ringscope-profile-export", daemon=True).start()

    def _export(self, profiler: Any, request_id: str, steps: tuple[int, int], duration_s: float) -> None:
        try:
            folder = profile_dir() / request_id
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"rank{self._rank}.pt.trace.json"
            profiler.export_chrome_trace(str(path))
            averages = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            top = [[e.key, round(e.self_cpu_time_total / 1e3, 4), round(getattr(e, "self_device_time_total", 0.0)
                                                                         / 1e3, 4), e.count]
                   for e in averages[:TOP_OPS]]
            self._answer(request_id, {"trace": str(path), "format": "chrome", "steps": list(steps),
                                      "duration_s": round(duration_s, 4), "top_ops": top,
                                      "top_ops_columns": ["operator", "self CPU ms", "self device ms", "calls"]})
        except Exception as exc:
            log.warning("ringscope: exporting the profile failed: %s", exc)
            self._answer(request_id, {"error": f"exporting the trace failed: {type(exc).__name__}: {exc}"})

    def _answer(self, request_id: str, body: dict[str, Any]) -> None:
        identity = self._agent.identity
        text = json.dumps({"id": request_id, "host": identity.host, "pid": identity.pid, "framework": "pytorch",
                           **body})
        self._agent.event(EventKind.PROFILE, rank=self._rank, text=text)
