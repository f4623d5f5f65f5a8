"""Zero-code PyTorch DDP: the patches the bootstrap installs once ``torch`` has finished importing.

Installed (``install``), each falling back to the original on any internal error:

* ``DistributedDataParallel.__init__``: the first DDP model built in the process is attached
  (``ZeroCodeAttachment``): a ``Probe`` of ``ringscope.agent.torch_ddp`` and, on CPU/gloo, light timing
  (``hook.GradReadyMarks``: no comm hook, DDP keeps its C++ all-reduce); on CUDA (or ``RINGSCOPE_DDP_TIMING=full``)
  one comm hook registered for good, a small dispatcher that calls the timing hook of the moment
  (``ringscope.agent.torch_ddp.hook``: the fused plain all-reduce, or ``timed_hook`` around the user's hook). When the
  script
  registers a hook of its own under light timing, the dispatcher is registered then, timing that hook, and the light
  marks stop. Later DDP models of the process are left alone.
* ``DistributedDataParallel.register_comm_hook`` (and ``_register_builtin_comm_hook``): on an attached model the
  user's hook is *wrapped* (the dispatcher switches to ``timed_hook(user_hook)``), never refused; DDP's own checks
  still run and raise what they would raise without Ringscope.
* ``_BaseDataLoaderIter.__next__`` (every DataLoader's iterator): on the training thread (the one that built the
  model) the blocking ``next()`` is data wait; the first batch of each iterator is flagged ``first_batch``;
  ``samples`` is the batch's first dimension.
* the global optimizer step post hook (``torch.optim.optimizer.register_optimizer_step_post_hook``), registered at
  the first attachment: **a step ends at the first ``optimizer.step()`` after the model's gradients were
  all-reduced.** A second optimizer stepping in the same iteration, or an optimizer of another model, ends nothing.
  Fallback without an optimizer step (manual updates, a skipped ``GradScaler`` step): a step whose gradients were
  all-reduced ends when the next batch is requested or the next DDP forward begins, whichever comes first (the last
  one at exit); the update then counts as compute. (The forward pre-hook doing this removes itself after the first
  optimizer step.) With gradient accumulation under ``no_sync()`` a step is one optimizer step, and its data wait
  and compute are those of its last micro-batch (each batch request restarts them).

Double instrumentation: ``ringscope.agent.torch_ddp.instrument`` on an attached model returns the attachment's probe
(``hand_over``), which stops marking steps and timing DataLoaders itself: the script's ``step_done`` and
``probe.loader`` take over, as in a manual run. Loss is not reported (the injected path never sees it).

What it must never do: raise into the training, change gradients, or block the training thread; on an internal
error it turns the injection off (``guard``) and DDP keeps communicating through the plain hook.
"""

from __future__ import annotations

import atexit
import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import dataloader

from ringscope.agent.heartbeat import COMPUTE, DATA_WAIT
from ringscope.agent.inject import guard
from ringscope.agent.schema import EventKind
from ringscope.agent.torch_ddp import ZERO_CODE_ATTRIBUTE, new_probe
from ringscope.agent.torch_ddp.hook import (
    _as_comm_hook,
    is_plain_allreduce,
    light_timing_wanted,
    timed_allreduce_hook,
    timed_hook,
)
from ringscope.agent.torch_ddp.probe import Probe, light_marks

_ORIGINAL_NEXT = dataloader._BaseDataLoaderIter.__next__
_ACTIVE: ZeroCodeAttachment | None = None  # the attachment marking steps itself (None: none, or handed over)
_ATTACHED_ONCE = False


# ---- Public API --------------------------------------------------------------------------------------------------

def install() -> None:
    """Patch DDP and DataLoader iteration (once per process). Called by the bootstrap after ``import torch``."""
    if getattr(DistributedDataParallel, "_ringscope_patched", False):
        return
    original_init = DistributedDataParallel.__init__
    original_register = DistributedDataParallel.register_comm_hook
    original_builtin = DistributedDataParallel._register_builtin_comm_hook

    @functools.wraps(original_init)
    def init(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _attach_first(self, original_register)

    @functools.wraps(original_register)
    def register_comm_hook(self: DistributedDataParallel, state: object, hook: Callable[..., Any]) -> None:
        attachment = self.__dict__.get(ZERO_CODE_ATTRIBUTE)
        if attachment is None:
            return original_register(self, state, hook)
        return attachment.user_registers(self, state, hook, original_register)  # type: ignore[no-any-return]

    @functools.wraps(original_builtin)
    def _register_builtin_comm_hook(self: DistributedDataParallel, comm_hook_type: Any) -> None:
        attachment = self.__dict__.get(ZERO_CODE_ATTRIBUTE)
        hook = _builtin_as_python(comm_hook_type)
        if attachment is None or hook is None:
            return original_builtin(self, comm_hook_type)
        return attachment.user_registers(  # type: ignore[no-any-return]
            self, self.process_group, hook, lambda ddp, state, h: original_builtin(ddp, comm_hook_type))

    DistributedDataParallel.__init__ = init  # type: ignore[method-assign]
    DistributedDataParallel.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
    DistributedDataParallel._register_builtin_comm_hook = _register_builtin_comm_hook  # type: ignore[method-assign]
    dataloader._BaseDataLoaderIter.__next__ = _timed_next  # type: ignore[method-assign]
    DistributedDataParallel._ringscope_patched = True  # type: ignore[attr-defined]


class ZeroCodeAttachment:
    """What zero-code attached to one DDP model: its probe, its switchable comm hook, and the step boundaries.

    Only the training thread (the one that built the model) marks steps and times batches. It holds no reference
    to the model (the model holds this object through its comm hook and attribute).
    """

    def __init__(self, ddp_model: DistributedDataParallel, probe: Probe) -> None:
        self.probe = probe
        self.thread = threading.get_ident()
        self.slot = CommHookSlot(probe, ddp_model.process_group)
        # DDP's own register_comm_hook (set at attach) and a weak reference to the model: light timing registers
        # the dispatcher only when the script brings a hook of its own (instrument(comm_hook=...) included)
        self.original_register: Callable[..., None] | None = None
        self._model: Callable[[], DistributedDataParallel | None] | None = weakref.ref(ddp_model)
        self._user_hook_set = False
        self._samples: int | None = None
        self._saw_optimizer_step = False
        self._forward_hook: Any = None
        self._closed = False
        self._full_timing_wanted = False  # set by a collector's request; applied at the next step boundary

    # ---- Called by instrument() and the patched DDP methods --------------------------------------------------------

    def hand_over(
        self, loader: Any, *, comm_hook: Callable[[Any, Any], Any] | None, comm_state: Any, to_device: Any
    ) -> Probe:
        """``instrument`` on this model: stop marking steps here and give the script the probe (see module doc)."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        self._remove_forward_hook()
        if comm_hook is not None:
            if self._user_hook_set:
                raise ValueError(
                    "this DDP model already has a communication hook and DDP allows only one; instead of "
                    "registering it yourself, pass it to instrument(model, loader, comm_hook=hook, comm_state=state)")
            self._user_hook_set = True
            self.slot.use(comm_hook, comm_state)
            if self._model is not None:
                model = self._model()
                if model is not None:
                    self._leave_light_timing(model)
        if loader is not None:
            self.probe.loader = self.probe.wrap_loader(loader, to_device=to_device)
        return self.probe

    def user_registers(
        self, ddp_model: DistributedDataParallel, state: object, hook: Callable[..., Any],
        original: Callable[[DistributedDataParallel, object, Callable[..., Any]], None],
    ) -> None:
        """The script registers its own comm hook: wrap it (DDP's checks and "only once" rule still apply)."""
        if self._user_hook_set:
            return original(ddp_model, state, hook)  # DDP refuses a second hook: the same error as without us
        ddp_model._check_comm_hook(hook)  # DDP's own validation, its own errors
        self._user_hook_set = True
        self.slot.use(hook, state)
        self._leave_light_timing(ddp_model)
        try:
            ddp_model.logger._set_comm_hook_name(getattr(hook, "__qualname__", str(hook)))  # type: ignore[union-attr]
        except Exception:  # a name in DDP's logging data only
            pass
        return None

    def _switch_to_full_timing(self) -> None:
        """Light -> full at a step boundary, on the training thread (the reducer is idle between steps)."""
        self._full_timing_wanted = False
        model = self._model() if self._model is not None else None
        if model is None or self.probe.light is None:
            return
        self._leave_light_timing(model)
        self.probe.agent.event(EventKind.WARNING, rank=self.probe.rank, step=self.probe.next_step,
                               text="DDP timing switched to full (per-bucket comm hook) from this step on")

    def _leave_light_timing(self, ddp_model: DistributedDataParallel) -> None:
        """A comm hook of the script's arrives while light timing runs: the dispatcher (timing the script's hook)
        becomes DDP's comm hook now, and the gradient-ready marks stop."""
        light = self.probe.light
        if light is None:
            return
        light.remove()
        self.probe.light = None
        if self.original_register is not None:
            self.original_register(ddp_model, None, self.slot.hook)

    def set_timing(self, timing: str) -> None:
        """The ``timing`` runtime setting (sender thread): ``full`` from the next step on; ``light`` only while it
        is light already (DDP cannot remove a communication hook once registered)."""
        light = self.probe.light is not None and not self._full_timing_wanted
        if timing == "full" and light:
            self._full_timing_wanted = True  # the training thread switches at its next step boundary
        elif timing == "light" and not light:
            raise ValueError("DDP cannot remove a communication hook once registered: light timing needs a restart "
                             "(RINGSCOPE_DDP_TIMING=light)")

    # ---- Step boundaries (training thread) -------------------------------------------------------------------------

    def before_batch(self) -> None:
        """A batch is requested: end a step whose gradients were reduced but no optimizer step ended it."""
        if _reduced_since_boundary(self.probe):
            self._end_step()
        if self._full_timing_wanted:
            self._switch_to_full_timing()
        self.probe.position.enter(DATA_WAIT, self.probe.next_step)  # for the heartbeat: where this rank is

    def batch_ready(self, started_wall_s: float, waited_s: float, first: bool, batch: Any) -> None:
        """The training loop got a batch after waiting ``waited_s``."""
        self.probe._batch_ready(started_wall_s, waited_s, first)
        self._samples = _batch_samples(batch)
        self.probe.position.enter(COMPUTE)

    def optimizer_stepped(self) -> None:
        """An optimizer step finished: it ends the step if the model's gradients were all-reduced since the last
        end."""
        if threading.get_ident() != self.thread:
            return
        self._saw_optimizer_step = True
        if _reduced_since_boundary(self.probe):
            self._end_step()

    def before_forward(self, module: Any, args: Any) -> None:
        """DDP forward begins (fallback boundary until an optimizer step has been seen; then this hook goes)."""
        try:
            if self._saw_optimizer_step or _ACTIVE is not self:
                self._remove_forward_hook()
            elif threading.get_ident() == self.thread and _reduced_since_boundary(self.probe):
                self._end_step()
        except Exception as exc:
            _fail("DDP forward hook", exc)

    def close(self) -> None:
        """End a step left open (gradients reduced, no boundary since), report what is in flight, stop the agent
        (at interpreter exit)."""
        if self._closed:
            return
        self._closed = True
        if _ACTIVE is self and _reduced_since_boundary(self.probe):
            self._end_step()
        self.probe.close()

    def report_crash(self, exc_type: type[BaseException], exc: BaseException) -> None:
        """The training thread ended with an uncaught exception: say so before the ``finished`` event."""
        self.probe.agent.event(EventKind.ERROR, rank=self.probe.rank, step=self.probe.next_step,
                               text=f"{exc_type.__name__}: {exc}")

    # ---- Internals -------------------------------------------------------------------------------------------------

    def _end_step(self) -> None:
        self.probe.step_done(samples=self._samples)
        self._samples = None

    def _remove_forward_hook(self) -> None:
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None

    def detach(self) -> None:
        """Stop measuring (internal error): plain communication from now on, no more step marks."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        self.slot.timed = None
        if self.probe.light is not None:
            self.probe.light.remove()
            self.probe.light = None
        self._remove_forward_hook()


class CommHookSlot:
    """The comm hook DDP holds under zero-code: a fixed dispatcher calling the timing hook of the moment.

    DDP takes one hook, once; the dispatcher lets the script register its own hook later (it is wrapped here) and
    lets an internal error fall back to the un-timed equivalent. The dispatcher adds one Python call per bucket.
    """

    def __init__(self, probe: Probe, process_group: Any) -> None:
        self._probe = probe
        self.plain: Callable[[Any, Any], Any] = default_hooks.allreduce_hook
        self.plain_state: Any = process_group
        self.timed: Callable[[Any, Any], Any] | None = None
        self.timed_state: Any = None
        self.use(self.plain, self.plain_state)
        self.hook = self._dispatcher()

    def use(self, hook: Callable[[Any, Any], Any], state: Any) -> None:
        """Communicate with ``hook(state, bucket)`` from now on, timed while the injection is on."""
        self.plain, self.plain_state = hook, state
        if not guard.active():
            self.timed = None
        elif is_plain_allreduce(hook):  # PyTorch's allreduce_hook on ``state`` (a group or None): the fused path
            self.timed, self.timed_state = timed_allreduce_hook(state, self._probe.bucket_marks,
                                                                self._probe.clock), None
        else:
            self.timed = timed_hook(hook, self._probe.bucket_marks, self._probe.clock)
            self.timed_state = state

    def _dispatcher(self) -> Callable[[Any, Any], Any]:
        slot = self
        probe = self._probe

        def zero_code(state: Any, bucket: Any) -> Any:
            timed = slot.timed
            if timed is None:
                return slot.plain(slot.plain_state, bucket)
            try:
                issued = probe._marks.issued
                before = len(issued)
                return timed(slot.timed_state, bucket)
            except Exception as exc:
                if len(issued) != before:
                    raise  # the bucket went to communication: its failure is the training's own, as without us
                slot.timed = None
                _fail("comm hook", exc)
                return slot.plain(slot.plain_state, bucket)

        return _as_comm_hook(zero_code, "zero_code")


# ---- Patched functions -------------------------------------------------------------------------------------------

@functools.wraps(_ORIGINAL_NEXT)
def _timed_next(self: Any) -> Any:
    attachment = _ACTIVE
    if attachment is None or threading.get_ident() != attachment.thread:
        return _ORIGINAL_NEXT(self)
    try:
        first = getattr(self, "_num_yielded", 1) == 0
        attachment.before_batch()
    except Exception as exc:
        _fail("DataLoader", exc)
        return _ORIGINAL_NEXT(self)
    started_wall, started = time.time(), time.perf_counter()
    batch = _ORIGINAL_NEXT(self)  # StopIteration and the loader's own errors pass through untouched
    waited = time.perf_counter() - started
    try:
        attachment.batch_ready(started_wall, waited, first, batch)
    except Exception as exc:
        _fail("DataLoader", exc)
    return batch


def _after_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    attachment = _ACTIVE
    if attachment is None:
        return
    try:
        attachment.optimizer_stepped()
    except Exception as exc:
        _fail("optimizer step hook", exc)


def _attach_first(ddp_model: DistributedDataParallel, original_register: Callable[..., None]) -> None:
    """Attach zero-code to the first DDP model of the process (never raises)."""
    global _ACTIVE, _ATTACHED_ONCE
    if _ATTACHED_ONCE or not guard.active():
        return
    _ATTACHED_ONCE = True
    try:
        guard.fault("attach")
        probe = new_probe(ddp_model)
        attachment = ZeroCodeAttachment(ddp_model, probe)
        attachment.original_register = original_register
        if light_timing_wanted(probe.clock):  # no comm hook: DDP keeps its C++ all-reduce until the script brings one
            probe.light = light_marks(ddp_model, probe)
        else:
            original_register(ddp_model, None, attachment.slot.hook)  # last: nothing to undo if anything failed
    except Exception as exc:
        _fail("attaching to DistributedDataParallel", exc)
        return
    ddp_model.__dict__[ZERO_CODE_ATTRIBUTE] = attachment
    _ACTIVE = attachment
    probe.agent.add_setting("timing", attachment.set_timing)  # ringscope control --timing full
    try:
        attachment._forward_hook = ddp_model.register_forward_pre_hook(attachment.before_forward)
        register_optimizer_step_post_hook(_after_optimizer_step)
        atexit.register(_close_at_exit, attachment)
        _chain_excepthook(attachment)
    except Exception as exc:
        _fail("attaching to DistributedDataParallel", exc)


def _close_at_exit(attachment: ZeroCodeAttachment) -> None:
    try:
        attachment.close()
    except Exception as exc:
        guard.failed("closing", exc)


def _chain_excepthook(attachment: ZeroCodeAttachment) -> None:
    previous = sys.excepthook

    def report_then_previous(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            attachment.report_crash(exc_type, exc)
        except Exception:  # the user's traceback matters more than our event
            pass
        previous(exc_type, exc, tb)

    sys.excepthook = report_then_previous


def _fail(where: str, exc: BaseException) -> None:
    attachment = _ACTIVE
    if attachment is not None:
        attachment.detach()
    guard.failed(where, exc)


def _builtin_as_python(comm_hook_type: Any) -> Callable[[Any, Any], Any] | None:
    """The Python twin of a DDP built-in comm hook type (ALLREDUCE, FP16_COMPRESS), None for others."""
    builtin = getattr(dist, "BuiltinCommHookType", None)
    if builtin is None:
        return None
    if comm_hook_type == builtin.ALLREDUCE:
        return default_hooks.allreduce_hook  # type: ignore[no-any-return]
    if comm_hook_type == builtin.FP16_COMPRESS:
        return default_hooks.fp16_compress_hook  # type: ignore[no-any-return]
    return None


def _reduced_since_boundary(probe: Probe) -> bool:
    """Whether buckets were all-reduced in the step in progress. Reads the marks without ``current_marks()``,
    which is the comm hook's accessor (it may record that the rank reached the collective)."""
    return bool(probe._marks.issued)


def _batch_samples(batch: Any, depth: int = 0) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (tuple, list and dict batches looked into)."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    if depth < 3:
        if isinstance(batch, (list, tuple)) and batch:
            return _batch_samples(batch[0], depth + 1)
        if isinstance(batch, dict) and batch:
            return _batch_samples(next(iter(batch.values())), depth + 1)
    return None
