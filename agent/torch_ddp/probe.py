"""The DDP probe: step boundaries, the timed data loader, checkpoint/restart events, and ``instrument``.

A ``Probe`` owns the marks of the step in progress, the comm-hook wrapper registered on the user's DDP model, the
timed loader, and (when it started it) the ``Agent``. Training-thread cost per step: a few host clock reads (or
CUDA event records), one small record put in the agent's queue; no I/O, no device synchronization. On CUDA, steps
are reported a step or two late, when ``event.query()`` says their last event has completed.

What it must never do: call ``.item()`` or ``synchronize()`` on the training thread during training, change the
model's gradients, or raise into the training loop because telemetry failed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ringscope.agent.heartbeat import CHECKPOINT, COLLECTIVE, COMPUTE, DATA_WAIT, IDLE
from ringscope.agent.profiling import StepProfiler
from ringscope.agent.runtime import Agent
from ringscope.agent.schema import EventKind, Step
from ringscope.agent.torch_ddp.hook import (
    GradReadyMarks,
    is_plain_allreduce,
    light_timing_wanted,
    timed_allreduce_hook,
    timed_hook,
)
from ringscope.agent.torch_ddp.identity import RankIdentity
from ringscope.agent.torch_ddp.profiling import TorchProfiler
from ringscope.agent.torch_ddp.timing import CudaClock, HostClock, StepMarks, phases


class TimedLoader:
    """Wraps a data loader: every ``iter()`` returns an iterator whose blocking ``next()`` is timed.

    The first batch of each iterator is flagged ``first_batch`` (its wait includes worker start-up). With
    ``to_device`` set, batches are moved there inside the timed section (the synchronous H2D part is data wait).
    """

    def __init__(self, loader: Iterable[Any], probe: Probe, to_device: Any = None) -> None:
        self.loader = loader
        self._probe = probe
        self._to_device = to_device

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.loader)
        first = True
        probe, to_device = self._probe, self._to_device
        position = probe.position
        while True:
            started_wall, started = time.time(), time.perf_counter()
            position.enter(DATA_WAIT, probe.next_step)
            try:
                batch = next(iterator)
            except StopIteration:
                position.enter(IDLE)
                return
            if to_device is not None:
                batch = _move(batch, to_device)
            probe._batch_ready(started_wall, time.perf_counter() - started, first)
            position.enter(COMPUTE)
            first = False
            yield batch


class Probe:
    """Per-rank DDP telemetry. Build with ``instrument``; see ``ringscope.agent.torch_ddp`` for the three-line use."""

    def __init__(self, agent: Agent, identity: RankIdentity, *, owns_agent: bool) -> None:
        # No reference to the DDP model: the model holds the comm hook, which holds this probe, and a reference
        # back would be a cycle through C++ that Python's collector cannot see (model, loader workers and agent
        # kept alive until the interpreter exits).
        self.agent = agent
        self.identity = identity
        self.rank = identity.rank
        self._owns_agent = owns_agent
        self.position = agent.position(identity.rank)  # where this rank is, for the agent's heartbeat
        self.clock: HostClock | CudaClock = CudaClock(identity.device) if identity.is_cuda else HostClock()
        self.next_step = 0
        self.epoch: int | None = None
        self.loader: TimedLoader | None = None
        self._pending: deque[StepMarks] = deque()
        self._previous_end: Any = None
        self._marks = self._new_marks(time.time(), None, False)
        self._marks.compute_start = self.clock.mark()
        self._closed = False
        self.light: GradReadyMarks | None = None  # light timing's hooks, when it times this model
        # Finished steps are turned into records on the agent's sender thread (every flush interval), not here:
        # the training thread only stamps and appends. The lock orders that with close(); step_done never takes it.
        self._report_lock = threading.Lock()
        self._background = agent.add_producer(self._report_pending)
        self.profiler = StepProfiler(agent, self.rank, TorchProfiler(identity.is_cuda))  # profiles on demand
        # weakly: the agent's sender thread lives on, and must not keep a dropped probe (and its model) alive
        probe = weakref.ref(self)

        def profile_requested(request_id: str, steps: int) -> None:
            alive = probe()
            if alive is None:
                raise RuntimeError("this rank's probe is gone")
            alive._profile_requested(request_id, steps)

        agent.set_profiler(profile_requested)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def wrap_loader(self, loader: Iterable[Any], *, to_device: Any = None) -> TimedLoader:
        """Time ``next()`` on ``loader``'s iterators (``instrument`` does this for the loader it is given)."""
        return TimedLoader(loader, self, to_device)

    def step_done(self, samples: int | None = None, loss: Any = None) -> None:
        """Mark the end of a step (after ``optimizer.step()``). ``loss`` may be a tensor: on CUDA it is copied
        without blocking and read once its event completed; a float or CPU tensor is read now."""
        marks = self._marks
        marks.loss = self._capture_loss(loss)  # before step_end: on CUDA its copy must precede the event we query
        marks.step_end = self.clock.mark()
        marks.end_wall_s = time.time()
        if marks.issued and marks.backward_end is None:
            marks.backward_end = marks.step_end  # backward end not detected: the step boundary bounds it
        marks.samples = samples
        marks.previous_end = self._previous_end
        self._previous_end = marks.step_end
        self._pending.append(marks)
        self.next_step += 1
        self._marks = self._new_marks(marks.end_wall_s, None, False)
        self._marks.compute_start = marks.step_end
        self.position.enter(IDLE, self.next_step)
        if self.profiler.armed:  # a profile on demand starts or ends at this step boundary
            self.profiler.at_step_end(self.next_step)
        if not self._background:
            self._flush(wait=False)

    def _profile_requested(self, request_id: str, steps: int) -> None:
        if self._closed:
            raise RuntimeError("this rank's probe is closed")
        self.profiler.request(request_id, steps)

    @contextlib.contextmanager
    def step(self, samples: int | None = None) -> Iterator[StepReport]:
        """``with probe.step(samples=n) as s: ...; s.loss = loss`` calls ``step_done`` when the block ends."""
        report = StepReport(samples)
        yield report
        self.step_done(report.samples, report.loss)

    def set_epoch(self, epoch: int) -> None:
        """Tag following steps with ``epoch`` and report an ``epoch`` event."""
        self.epoch = epoch
        self._marks.epoch = epoch
        self.agent.event(EventKind.EPOCH, rank=self.rank, step=self.next_step, epoch=epoch)

    def checkpoint_saved(self, target: str | os.PathLike[str] | bytes | int | None, duration_s: float | None) -> None:
        """Report a saved checkpoint: ``target`` is its path (file or directory, measured), its bytes, or a size."""
        self.agent.event(
            EventKind.CHECKPOINT_SAVED, rank=self.rank, step=self.next_step, duration_s=duration_s,
            bytes=_size_of(target), text=_path_text(target),
        )

    def checkpoint_restored(
        self, source: str | os.PathLike[str] | bytes | int | None, duration_s: float | None, *, step: int | None
    ) -> None:
        """Report a restored checkpoint; ``step`` (steps already done) makes step numbering continue from it."""
        if step is not None:
            self.next_step = step
            self._marks.step = step
        self.agent.event(
            EventKind.CHECKPOINT_RESTORED, rank=self.rank, step=step, duration_s=duration_s,
            bytes=_size_of(source), text=_path_text(source),
        )

    @contextlib.contextmanager
    def checkpoint(self, path: str | os.PathLike[str]) -> Iterator[None]:
        """``with probe.checkpoint(path): torch.save(state, path)`` times the save and reports the file's bytes."""
        started = time.perf_counter()
        self.position.enter(CHECKPOINT)
        try:
            yield
        finally:
            self.position.enter(IDLE)
        self.checkpoint_saved(path, time.perf_counter() - started)

    def close(self, timeout_s: float = 2.0) -> None:
        """Report the steps still in flight (waits for their CUDA events: call after training) and stop the agent
        if the probe started it."""
        if self._closed:
            return
        self._closed = True
        self.agent.remove_producer(self._report_pending)
        with self._report_lock:
            self._flush(wait=True)
        if self._owns_agent:
            self.agent.close(timeout_s)

    def flush(self) -> None:
        """Report the finished steps now, on this thread (the agent's sender thread does it every flush interval;
        ``close`` does it last). Never waits for CUDA events."""
        with self._report_lock:
            self._flush(wait=False)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- Called by the hook and the loader -----------------------------------------------------------------------

    def current_marks(self) -> StepMarks:
        """The marks of the step in progress (read-only use: no side effect)."""
        return self._marks

    def bucket_marks(self) -> StepMarks:
        """The marks a comm hook stamps a bucket into (called once per bucket, on the training thread): also moves
        this rank's position into the collective at the step's first bucket, for the heartbeat."""
        marks = self._marks
        if marks.issued:
            self.position.bucket = len(marks.issued)
        else:  # the first bucket of the step: this rank reached the collective
            self.position.enter(COLLECTIVE, self.next_step, 0)
        return marks

    def _batch_ready(self, started_wall_s: float, waited_s: float, first: bool) -> None:
        marks = self._marks
        marks.start_wall_s = started_wall_s
        marks.data_wait_host_s = waited_s
        marks.first_batch = first
        marks.compute_start = self.clock.mark()

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _new_marks(self, start_wall_s: float, data_wait_s: float | None, first: bool) -> StepMarks:
        return StepMarks(self.next_step, start_wall_s, data_wait_s, first, self.epoch)

    def _capture_loss(self, loss: Any) -> Any:
        if loss is None or isinstance(loss, (int, float)):
            return loss
        if self.clock.cuda and getattr(loss, "is_cuda", False):
            return loss.detach().to("cpu", non_blocking=True)  # lands in host memory when step_end has completed
        # read on the sender thread with the rest of the step, a flush interval later at most (its graph was freed
        # by backward; what the reference keeps alive until then is a few small autograd nodes)
        return loss if self._background else float(loss.detach())

    def _report_pending(self) -> None:
        """On the agent's sender thread: report the finished steps (those whose CUDA events completed)."""
        with self._report_lock:
            if not self._closed:
                self._flush(wait=False)

    def _flush(self, *, wait: bool) -> None:
        clock = self.clock
        while self._pending:
            marks = self._pending[0]
            if not clock.ready(marks.step_end):
                if not wait or not isinstance(clock, CudaClock):
                    return
                clock.synchronize(marks.step_end)
            self._pending.popleft()
            self._report(marks)

    def _report(self, marks: StepMarks) -> None:
        try:
            p = phases(self.clock, marks)
            loss = marks.loss
            if loss is not None and not isinstance(loss, (int, float)):
                loss = float(loss.detach() if hasattr(loss, "detach") else loss)
        except Exception as exc:  # telemetry must never break training: report it and drop the step
            self.agent.event(EventKind.WARNING, rank=self.rank, step=marks.step, text=f"step not measured: {exc}")
            return
        self.agent.put(Step(
            self.rank, marks.step, marks.end_wall_s - p.step_s, marks.end_wall_s, p.step_s, p.data_wait_s,
            p.compute_s, p.comm_s, p.comm_exposed_s, marks.samples, loss,
            None if marks.light else len(marks.issued) or None,
            marks.bucket_bytes or None, marks.first_batch, marks.epoch,
        ))


class StepReport:
    """What the ``with probe.step()`` block tells the probe: samples and loss of the step."""

    def __init__(self, samples: int | None) -> None:
        self.samples = samples
        self.loss: Any = None


def register_timing_hook(
    ddp_model: Any, probe: Probe, comm_hook: Callable[[Any, Any], Any] | None, comm_state: Any,
    timing: str | None = None,
) -> None:
    """Time ``ddp_model``'s communication: without a comm hook of the user's, light timing where it applies
    (``GradReadyMarks``: DDP's built-in all-reduce untouched), else the timing wrapper around ``comm_hook``
    (plain all-reduce gets the fused ``timed_allreduce_hook``: same gradients, one Python callback per bucket less).
    """
    if comm_hook is None and light_timing_wanted(probe.clock, timing):
        probe.light = light_marks(ddp_model, probe)
    elif comm_hook is None or is_plain_allreduce(comm_hook):
        ddp_model.register_comm_hook(None, timed_allreduce_hook(comm_state, probe.bucket_marks, probe.clock))
    else:
        ddp_model.register_comm_hook(comm_state, timed_hook(comm_hook, probe.bucket_marks, probe.clock))


def light_marks(ddp_model: Any, probe: Probe) -> GradReadyMarks:
    """``GradReadyMarks`` stamping ``probe``'s step in progress; the rank enters the collective (for the heartbeat)
    at its step's first gradient."""
    position = probe.position

    def entered() -> None:
        position.enter(COLLECTIVE, probe.next_step, 0)

    return GradReadyMarks(ddp_model, probe.current_marks, probe.clock, entered)


def _move(batch: Any, device: Any) -> Any:
    if hasattr(batch, "to"):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_move(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: _move(value, device) for key, value in batch.items()}
    return batch


def _size_of(target: str | os.PathLike[str] | bytes | int | None) -> int | None:
    """Bytes of a checkpoint given as a size, the bytes themselves, a file, or a directory (summed)."""
    if target is None:
        return None
    if isinstance(target, int):
        return target
    if isinstance(target, (bytes, bytearray, memoryview)):
        return len(target)
    path = os.fspath(target)
    try:
        if os.path.isdir(path):
            return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
        return os.path.getsize(path)
    except OSError:
        return None


def _path_text(target: object) -> str | None:
    return os.fspath(target) if isinstance(target, (str, os.PathLike)) else None  # type: ignore[arg-type]
