"""The timing communication hook: wraps the user's DDP comm hook and stamps each bucket's issue and completion.

DDP allows exactly one comm hook, so Ringscope never replaces the user's: ``timed_hook`` calls the wrapped hook
(default: ``allreduce_hook``, the Python twin of DDP's built-in all-reduce; or fp16/bf16 compression, or PowerSGD
with its state) unchanged. The wrapped hook divides by the world size itself, exactly as it would unwrapped, so the
gradients are bit-for-bit what the user's hook produces. Around it the wrapper:

* marks the bucket's issue (gradients ready, all-reduce launched) and counts the bucket and its bytes;
* chains ``.then()`` on the returned future to mark completion (host clock on gloo; on NCCL a CUDA event on the
  callback's stream, which CUDA futures make wait for the collective);
* for the last bucket, detects the end of backward: it queues an autograd-engine final callback which queues a
  second one. DDP's own finalizer (which waits on every bucket's future) is queued right after the last bucket's
  hook returns, and final callbacks run in queue order, so the *second* callback runs after DDP waited for all
  communication and just before ``loss.backward()`` returns. Its mark is "backward returned".

What it must never do: change gradient values, block, or do I/O.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agent.torch_ddp.timing import CudaClock, HostClock, StepMarks

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
        marks.bucket_bytes += buffer.numel() * buffer.element_size()
        future = inner(state, bucket)
        completed = marks.completed

        def on_done(fut: Any) -> Any:
            completed.append(mark())
            return fut.value()

        if bucket.is_last():
            _mark_backward_end(engine, marks, mark)
        return future.then(on_done)

    # DDP inspects the hook: it must have a parameter named "bucket" whose annotation is empty or the GradBucket
    # class itself (string annotations from ``from __future__ import annotations`` fail that check), and a name.
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("state", "bucket")]
    setattr(ringscope_timed_hook, "__signature__", inspect.Signature(params))  # noqa: B010 - mypy: no such attr
    inner_name = getattr(inner, "__name__", "hook")
    ringscope_timed_hook.__name__ = ringscope_timed_hook.__qualname__ = f"ringscope_timed_{inner_name}"
    return ringscope_timed_hook


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
