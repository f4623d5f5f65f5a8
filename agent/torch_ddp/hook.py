"""The timing communication hook: wraps the user's DDP comm hook and stamps each bucket's issue and completion.

DDP allows exactly one comm hook, so Ringscope never replaces the user's: ``timed_hook`` calls the wrapped hook
(fp16/bf16 compression, PowerSGD with its state, any user hook) unchanged. The wrapped hook divides by the world
size itself, exactly as it would unwrapped, so the gradients are bit-for-bit what the user's hook produces. Around
it the wrapper:

* marks the bucket's issue (gradients ready, all-reduce launched) and counts the bucket and its bytes;
* chains ``.then()`` on the returned future to mark completion (host clock on gloo; on NCCL a CUDA event on the
  callback's stream, which CUDA futures make wait for the collective);
* for the last bucket, detects the end of backward: it queues an autograd-engine final callback which queues a
  second one. DDP's own finalizer (which waits on every bucket's future) is queued right after the last bucket's
  hook returns, and final callbacks run in queue order, so the *second* callback runs after DDP waited for all
  communication and just before ``loss.backward()`` returns. Its mark is "backward returned". (One callback is not
  enough: queued from the hook, it would run *before* DDP's finalizer, i.e. before the wait it must bracket.)

Plain all-reduce (no hook given, or PyTorch's ``allreduce_hook``, the Python twin of DDP's built-in all-reduce)
takes a cheaper path, ``timed_allreduce_hook``: the same two operations as ``allreduce_hook`` on the same process
group (``buffer.div_(group size)``, then an asynchronous SUM all-reduce), so the gradients are bit-for-bit the
same, but issued on the process group object directly (``dist.all_reduce``'s Python argument checks cost ~20 µs
per bucket here) and with the completion mark taken inside the one ``.then()`` callback that every Python hook
needs anyway to turn the collective's list result into a tensor: one Python callback per bucket instead of two.
Profiled on gloo, that Python hook path, not the marks, was most of the instrumented step's extra time over DDP's
built-in C++ all-reduce.

**Light timing** (``GradReadyMarks``, the default on CPU/gloo when the script brings no comm hook of its own): no
comm hook at all, so DDP keeps its built-in C++ all-reduce and the per-bucket Python cost is gone. A
post-accumulate-grad hook on each parameter DDP reduces overwrites one mark, "last gradient ready" (DDP launches the
last bucket's all-reduce right then); the first of them each step queues the same two-deep final callback, so the
AllReduce stall is *backward returned − last gradient ready*: the same exposed wait, measured without touching the
communication. What it cannot see: each bucket's completion, so the total (overlapped) communication time
``comm_s`` and the bucket count are not reported in this mode (``RINGSCOPE_DDP_TIMING=full`` or
``instrument(..., timing="full")`` restores the per-bucket hook). CUDA keeps the per-bucket hook: its marks are
CUDA events, and one per parameter per step would cost more than the hook it replaces.

What it must never do: change gradient values, block, or do I/O.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ringscope.agent.torch_ddp.timing import CudaClock, HostClock, StepMarks

COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")


def comm_hook_for(compression: str, process_group: Any = None, *, powersgd_start_iter: int = 10) -> tuple[Any, Any]:
    """The built-in ``(hook, state)`` pair for a compression name: none | fp16 | bf16 | powersgd.

    PowerSGD's state is rank 1 with error feedback, switching from plain all-reduce to PowerSGD after
    ``powersgd_start_iter`` steps (PyTorch's default of 1000 would mean no compression in short runs).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if compression == "none":
        return default_hooks.allreduce_hook, process_group
    if compression == "fp16":
        return default_hooks.fp16_compress_hook, process_group
    if compression == "bf16":
        return default_hooks.bf16_compress_hook, process_group
    if compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=process_group, matrix_approximation_rank=1, start_powerSGD_iter=max(2, powersgd_start_iter)
        )
        return powerSGD_hook.powerSGD_hook, state
    raise ValueError(f"unknown gradient compression {compression!r}; choose one of {', '.join(COMPRESSIONS)}")


def timed_hook(
    inner: Callable[[Any, Any], Any],
    current_marks: Callable[[], StepMarks],
    clock: HostClock | CudaClock,
) -> Callable[[Any, Any], Any]:
    """Wrap ``inner`` (a DDP comm hook) so it stamps ``current_marks()`` of the step in progress.

    Register the result with ``ddp.register_comm_hook(inner_state, wrapped)``: DDP passes ``inner_state`` through.
    """
    import torch

    engine = torch.autograd.Variable._execution_engine
    mark = clock.mark

    def ringscope_timed_hook(state: Any, bucket: Any) -> Any:
        marks = current_marks()
        buffer = bucket.buffer()
        marks.issued.append(mark())
        marks.bucket_bytes += buffer.nbytes
        future = inner(state, bucket)
        completed = marks.completed

        def on_done(fut: Any) -> Any:
            completed.append(mark())
            return fut.value()

        if bucket.is_last():
            _mark_backward_end(engine, marks, mark)
        return future.then(on_done)

    return _as_comm_hook(ringscope_timed_hook, getattr(inner, "__name__", "hook"))


def timed_allreduce_hook(
    process_group: Any,
    current_marks: Callable[[], StepMarks],
    clock: HostClock | CudaClock,
) -> Callable[[Any, Any], Any]:
    """PyTorch's ``allreduce_hook`` on ``process_group`` (None: the default group) with the marks of ``timed_hook``
    fused into it: one ``.then()`` callback per bucket (see the module docstring). Register it with
    ``ddp.register_comm_hook(None, hook)``; the group is bound here, at registration.
    """
    import torch
    import torch.distributed as dist

    engine = torch.autograd.Variable._execution_engine
    mark = clock.mark
    group = process_group if process_group is not None else dist.group.WORLD
    if group is None:
        raise ValueError("timed_allreduce_hook needs an initialized process group: call init_process_group first")
    world_size = group.size()
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.SUM  # type: ignore[assignment]  # stubs: RedOpType is what dist.all_reduce sets
    options.asyncOp = True
    allreduce = group.allreduce

    def ringscope_timed_allreduce_hook(state: Any, bucket: Any) -> Any:
        marks = current_marks()
        buffer = bucket.buffer()
        marks.issued.append(mark())
        marks.bucket_bytes += buffer.nbytes
        completed = marks.completed
        # allreduce_hook's exact operations: divide first (avoids fp16 overflow), then SUM across the group.
        buffer.div_(world_size)
        if buffer.is_complex():  # never seen from DDP (it views complex gradients as real); dist.all_reduce's path
            future = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        else:
            future = allreduce([buffer], options).get_future()

        def on_done(fut: Any) -> Any:
            completed.append(mark())  # the collective is complete when its future's callback runs
            return fut.value()[0]

        if bucket.is_last():
            _mark_backward_end(engine, marks, mark)
        return future.then(on_done)

    return _as_comm_hook(ringscope_timed_allreduce_hook, "allreduce_hook")


class GradReadyMarks:
    """Light timing of a DDP model (see the module docstring): post-accumulate-grad hooks that stamp "last gradient
    ready" into ``current_marks()``. ``on_first`` runs at the step's first gradient (the heartbeat's position).

    Per step: one Python call per reduced parameter (a clock read and a list store) and one queued final callback.
    """

    def __init__(self, ddp_model: Any, current_marks: Callable[[], StepMarks], clock: HostClock | CudaClock,
                 on_first: Callable[[], None]) -> None:
        import torch

        engine = torch.autograd.Variable._execution_engine
        mark = clock.mark
        ignored = set(getattr(ddp_model, "parameters_to_ignore", ()) or ())
        params = [p for name, p in ddp_model.module.named_parameters() if p.requires_grad and name not in ignored]
        total_bytes = sum(p.numel() * p.element_size() for p in params)

        def ringscope_gradient_ready(_param: Any) -> None:
            marks = current_marks()
            issued = marks.issued
            if issued:
                issued[0] = mark()
                return
            issued.append(mark())
            marks.light = True
            marks.bucket_bytes = total_bytes
            on_first()
            _mark_backward_end(engine, marks, mark)

        self.bytes_per_step = total_bytes
        self._handles = [p.register_post_accumulate_grad_hook(ringscope_gradient_ready) for p in params]

    def remove(self) -> None:
        """Stop marking (a comm hook takes over, or the injection is turned off)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def light_timing_wanted(clock: HostClock | CudaClock, timing: str | None = None) -> bool:
    """Whether to time with ``GradReadyMarks`` rather than a per-bucket comm hook: ``timing`` ("light" / "full"),
    else ``RINGSCOPE_DDP_TIMING``, else light on host clocks (CPU/gloo) and full on CUDA."""
    import os

    choice = (timing or os.environ.get("RINGSCOPE_DDP_TIMING", "")).strip().lower()
    return choice != "full" and not clock.cuda


def is_plain_allreduce(hook: Callable[[Any, Any], Any] | None) -> bool:
    """Whether ``hook`` is plain all-reduce (None or PyTorch's ``allreduce_hook``): ``timed_allreduce_hook`` fits."""
    if hook is None:
        return True
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return hook is default_hooks.allreduce_hook


def _as_comm_hook(hook: Callable[[Any, Any], Any], inner_name: str) -> Callable[[Any, Any], Any]:
    # DDP inspects the hook: it must have a parameter named "bucket" whose annotation is empty or the GradBucket
    # class itself (string annotations from ``from __future__ import annotations`` fail that check), and a name.
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("state", "bucket")]
    setattr(hook, "__signature__", inspect.Signature(params))  # noqa: B010 - mypy: no such attr
    hook.__name__ = hook.__qualname__ = f"ringscope_timed_{inner_name}"
    return hook


def _mark_backward_end(engine: Any, marks: StepMarks, mark: Callable[[], Any]) -> None:
    """Queue the two-deep final callback that marks the end of backward (see the module docstring)."""

    def stamp() -> None:
        marks.backward_end = mark()

    def after_ddp_finalizer() -> None:
        engine.queue_callback(stamp)

    try:
        engine.queue_callback(after_ddp_finalizer)
    except RuntimeError:
        # Not inside a backward pass (a hook called by hand): fall back to the step boundary, set by the probe.
        marks.backward_end = None
