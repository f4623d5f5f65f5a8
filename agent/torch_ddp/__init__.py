"""Ringscope for PyTorch DDP: per-rank step phases, AllReduce stall, data-loader wait, checkpoints, restarts.

Add it to a DDP training script in three lines::

    from ringscope.agent.torch_ddp import instrument

    probe = instrument(ddp_model, loader)              # after DDP(...), before the first backward
    for x, y in probe.loader:                          # the loader, with next() timed
        loss = loss_fn(ddp_model(x), y); loss.backward(); optimizer.step(); optimizer.zero_grad()
        probe.step_done(samples=len(x), loss=loss)     # a tensor is fine: never .item() on CUDA
    probe.close()                                      # or: with instrument(...) as probe:

or ``with probe.step(samples=n) as s: ...; s.loss = loss``. Options of ``instrument``:

* ``comm_hook=..., comm_state=...`` your DDP communication hook and its state (fp16/bf16 compression, PowerSGD
  with its ``PowerSGDState``...). Ringscope *wraps* it (DDP allows one hook); without one (or with PyTorch's
  ``allreduce_hook``) it installs plain all-reduce with the timing fused in (``hook.timed_allreduce_hook``: same
  gradients as ``allreduce_hook``, one Python callback per bucket). Like every DDP comm hook, that hook divides the
  bucket by the world size in a pass of its own, which DDP's built-in C++ all-reduce folds into its gradient copy.
  Build DDP with ``gradient_as_bucket_view=True`` (PyTorch's advice anyway) and that copy does not exist, so the
  division is again the only pass; without it, on a CPU, the extra pass is the main per-step cost on large models
  (~0.2 ms per million parameters measured here; a short kernel on a GPU).
  ``comm_hook_for("fp16"|"bf16"|"powersgd"|"none")`` returns the built-in pairs.
* ``timing="light"|"full"`` (default: ``RINGSCOPE_DDP_TIMING``, else light on CPU/gloo, full on CUDA): without a
  comm hook of yours, *light* timing registers no comm hook at all — DDP keeps its built-in C++ all-reduce and the
  AllReduce stall is measured as backward returned − last gradient ready (``hook.GradReadyMarks``); the total,
  overlapped communication time and the bucket count are then not reported. *full* installs the per-bucket hook
  described above, which also times each bucket's completion.
* ``to_device=device`` moves each batch there inside the timed ``next()`` (its synchronous part is data wait).
* ``agent=`` an ``agent.Agent`` you started yourself; otherwise one is started from torchrun's environment
  (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK``), the process group's backend, and the model's device
  (a GPU is mapped to its NVML index by UUID, so samples are tagged with this rank). ``RINGSCOPE_ENDPOINT``,
  ``RINGSCOPE_RUN_ID`` and ``RINGSCOPE_DISABLE`` apply (see ``ringscope.agent.runtime``).

Checkpoints and restarts: ``with probe.checkpoint(path): torch.save(state, path)`` (times the save, reports the
file's bytes) or ``probe.checkpoint_saved(path_or_bytes, duration_s)``; after loading one,
``probe.checkpoint_restored(path, duration_s, step=steps_done)`` continues the step numbering. When torchrun
restarted the workers (``TORCHELASTIC_RESTART_COUNT`` > 0) a ``restart`` event is sent at start.

What is measured, per step and rank (definitions in ``ringscope.agent.torch_ddp.timing``): data_wait_s, compute_s,
comm_s, comm_exposed_s (the AllReduce stall), step_s, samples, loss, bucket count and bytes. CPU/gloo uses host clocks;
CUDA/NCCL uses CUDA events read a step or two later with ``query()``, never a synchronize. The backward pass is
assumed to run on the default stream (true unless the user moves it to another stream).

This package is the only part of ``agent`` that imports torch, and only when ``instrument`` (or a submodule) is
imported: ``import agent`` stays framework-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ringscope.agent.runtime import Agent, start
from ringscope.agent.schema import EventKind
from ringscope.agent.torch_ddp.hook import COMPRESSIONS, comm_hook_for
from ringscope.agent.torch_ddp.identity import RankIdentity, rank_identity
from ringscope.agent.torch_ddp.probe import Probe, StepReport, TimedLoader, register_timing_hook

ZERO_CODE_ATTRIBUTE = "_ringscope_zero_code"
"""Attribute of a DDP model that zero-code (``ringscope.agent.inject``) instrumented: its attachment (see
``instrument``)."""


def instrument(
    ddp_model: Any,
    loader: Iterable[Any] | None = None,
    *,
    comm_hook: Callable[[Any, Any], Any] | None = None,
    comm_state: Any = None,
    to_device: Any = None,
    agent: Agent | None = None,
    endpoint: str | None = None,
    run_id: str | None = None,
    timing: str | None = None,
) -> Probe:
    """Instrument a ``DistributedDataParallel`` model (and its loader) on this rank; returns the ``Probe``.

    Call after wrapping the model in DDP and before the first backward (DDP takes a comm hook only then).
    Raises ``ValueError`` when ``ddp_model`` is not a DDP model or already has a comm hook.

    Under ``ringscope run`` (zero-code) the model already carries Ringscope's probe: ``instrument`` then returns
    that probe, switched to this script's own step marks (``step_done``) and loader, with ``comm_hook`` wrapped in
    place of plain all-reduce; ``agent``, ``endpoint`` and ``run_id`` are ignored (the run's environment decides).
    Nothing is measured twice.
    """
    if not hasattr(ddp_model, "register_comm_hook"):
        raise ValueError(
            f"instrument() needs a torch.nn.parallel.DistributedDataParallel model, got {type(ddp_model).__name__}; "
            "wrap the model with DDP(model) first"
        )
    attached = getattr(ddp_model, ZERO_CODE_ATTRIBUTE, None)
    if attached is not None:  # zero-code instrumented this model at construction: hand its probe over
        probe: Probe = attached.hand_over(loader, comm_hook=comm_hook, comm_state=comm_state, to_device=to_device)
        return probe
    if getattr(ddp_model, "_comm_hooks", None):
        raise ValueError(
            "this DDP model already has a communication hook and DDP allows only one; instead of registering it "
            "yourself, pass it to instrument(model, loader, comm_hook=hook, comm_state=state) so Ringscope wraps it"
        )
    probe = new_probe(ddp_model, agent=agent, endpoint=endpoint, run_id=run_id)
    register_timing_hook(ddp_model, probe, comm_hook, comm_state, timing)
    if loader is not None:
        probe.loader = probe.wrap_loader(loader, to_device=to_device)
    return probe


def new_probe(
    ddp_model: Any, *, agent: Agent | None = None, endpoint: str | None = None, run_id: str | None = None
) -> Probe:
    """A ``Probe`` for ``ddp_model``'s rank, with no comm hook registered yet (``instrument`` and zero-code
    register theirs). Starts an agent from torchrun's environment unless ``agent`` is given; reports a torchrun
    restart."""
    identity = rank_identity(ddp_model)
    owns_agent = agent is None
    if agent is None:
        agent = start(
            framework="pytorch", strategy="ddp", rank=identity.rank, local_rank=identity.local_rank,
            world_size=identity.world_size, node_rank=identity.node_rank, backend=identity.backend,
            devices=identity.devices, endpoint=endpoint, run_id=run_id,
            gpu_indices=None if identity.nvml_index is None else [identity.nvml_index],
            rank_of_gpu=None if identity.nvml_index is None else {identity.nvml_index: identity.rank},
        )
    probe = Probe(agent, identity, owns_agent=owns_agent)
    if identity.restart_count > 0:
        agent.event(EventKind.RESTART, rank=identity.rank, text=f"torchrun restart {identity.restart_count}")
    return probe


__all__ = [
    "COMPRESSIONS",
    "ZERO_CODE_ATTRIBUTE",
    "Probe",
    "RankIdentity",
    "StepReport",
    "TimedLoader",
    "comm_hook_for",
    "instrument",
    "new_probe",
]
