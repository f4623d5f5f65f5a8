"""Clocks and per-step marks for the DDP probe: what was stamped during one step and how it becomes a ``Step``.

Two clocks with one interface so the phase arithmetic is written once:

* ``HostClock`` (CPU / gloo): a mark is ``time.perf_counter()``; every mark is final when it is taken.
* ``CudaClock`` (CUDA / NCCL): a mark is a ``torch.cuda.Event`` recorded on the current stream, because NCCL's
  future callbacks can run while its kernels still execute, so host clocks would measure launches, not work. Marks
  are read a step or two later, once ``event.query()`` says the last one has completed; nothing here ever
  synchronizes the device on the training thread.

Phase definitions (shared MEASURING.md), all from marks of one step k:

* ``data_wait_s``: host: the blocking ``next()`` (+ the probe's H2D copy). CUDA: the device gap between the end of
  step k-1 and the start of step k's compute (true GPU idle; host wait overstates it when the CPU ran ahead).
* ``comm_exposed_s`` (AllReduce stall): backward end - last bucket issued. The last bucket is issued when this
  rank's gradients are all computed; backward ends after DDP's finalizer waited for every bucket's future, so the
  difference is the time the rank waited for communication, including waiting for the slowest rank. Per-bucket
  durations are never summed (buckets queue behind each other).
* ``comm_s``: first bucket issued -> last bucket completed (wall span of the all-reduces, overlapped or not).
* ``compute_s``: (compute start -> last bucket issued) + (backward end -> step end).

This module never does I/O and never imports torch at module import (``CudaClock`` imports it when built).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


class HostClock:
    """Marks are host ``perf_counter`` seconds; always ready."""

    cuda = False

    def mark(self) -> Any:
        """Take a mark now."""
        return time.perf_counter()

    def ready(self, mark: Any) -> bool:
        """Whether ``mark`` can be read without waiting (always, on the host)."""
        return True

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds from ``start`` to ``end``."""
        return float(end - start)


class CudaClock:
    """Marks are timing-enabled CUDA events recorded on the current stream of ``device``."""

    cuda = True

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self._device = device

    def mark(self) -> Any:
        """Record an event on the current stream (enqueue only: no synchronization)."""
        event = self._torch.cuda.Event(enable_timing=True)
        event.record(self._torch.cuda.current_stream(self._device))
        return event

    def ready(self, mark: Any) -> bool:
        """True once the GPU has passed ``mark`` (``event.query()``, never a wait)."""
        return bool(mark.query())

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two completed events."""
        return float(start.elapsed_time(end)) / 1000.0

    def synchronize(self, mark: Any) -> None:
        """Wait for ``mark`` (only used when the probe closes, never per step)."""
        mark.synchronize()


@dataclass(slots=True)
class StepMarks:
    """Everything stamped during one step. Hook and completion callbacks append from other threads (list.append
    is atomic); the training thread reads the marks only after backward returned, when all of them are in."""

    step: int
    start_wall_s: float
    data_wait_host_s: float | None
    first_batch: bool
    epoch: int | None
    compute_start: Any = None
    issued: list[Any] = field(default_factory=list)
    completed: list[Any] = field(default_factory=list)
    bucket_bytes: int = 0
    backward_end: Any = None
    step_end: Any = None
    end_wall_s: float = 0.0
    previous_end: Any = None
    samples: int | None = None
    loss: Any = None
    light: bool = False  # stamped by GradReadyMarks: one "last gradient ready" mark, no per-bucket completions


@dataclass(frozen=True, slots=True)
class Phases:
    """Seconds per phase of one finished step (``None`` when the step had no such phase, e.g. no all-reduce)."""

    step_s: float
    data_wait_s: float | None
    compute_s: float | None
    comm_s: float | None
    comm_exposed_s: float | None


def phases(clock: HostClock | CudaClock, marks: StepMarks) -> Phases:
    """Turn one step's marks into phase durations (definitions in the module docstring)."""
    elapsed = clock.elapsed
    comm_s = comm_exposed_s = None
    if marks.issued and marks.backward_end is not None:
        last_issue = marks.issued[-1]
        comm_exposed_s = max(0.0, elapsed(last_issue, marks.backward_end))
        if marks.completed:
            comm_s = max(elapsed(marks.issued[0], done) for done in marks.completed)
        compute_s: float | None = elapsed(marks.compute_start, last_issue) + elapsed(marks.backward_end, marks.step_end)
    else:  # no all-reduce this step (e.g. inside no_sync()): everything after the data is compute
        compute_s = elapsed(marks.compute_start, marks.step_end)
    data_wait_s = marks.data_wait_host_s
    step_s = marks.end_wall_s - marks.start_wall_s
    if clock.cuda and marks.previous_end is not None:
        data_wait_s = max(0.0, elapsed(marks.previous_end, marks.compute_start))
        step_s = elapsed(marks.previous_end, marks.step_end)
    return Phases(step_s, data_wait_s, None if compute_s is None else max(0.0, compute_s), comm_s, comm_exposed_s)
