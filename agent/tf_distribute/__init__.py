"""TensorFlow ``tf.distribute`` integration: per-replica step telemetry for MirroredStrategy and
MultiWorkerMirroredStrategy, a Keras ``model.fit`` callback, and checkpoint events.

What it owns: turning a TF training (custom loop or ``fit``) into ``Step`` / ``Event`` records with the same
definitions as the PyTorch DDP integration (shared MEASURING.md). What it must never do: import tensorflow when
``agent`` (or this package) is imported — TensorFlow is imported only when one of the names below that needs it is
first used — or raise into the training loop because telemetry failed.

* ``worker_identity`` / ``replica_ranks`` (``identity``, no TF): who this process is, from ``TF_CONFIG``.
* ``start_agent`` (``runtime``): ``agent.start`` with the identity of a strategy: one agent per process whose
  ``Hello.ranks`` lists one global rank per local replica (MirroredStrategy: all replicas; MultiWorker: this
  worker's ``worker_rank * local_replicas + i``).
* ``TimedStepRunner`` (``loop``): the custom-loop helper. Reports per step and per replica ``data_wait_s``,
  ``compute_s``, ``comm_s``, ``comm_exposed_s``, ``step_s``, ``samples``, ``loss``; applies gradients after one
  explicit all-reduce, never two.
* ``RingscopeCallback`` (``keras_callback``): for ``model.fit`` users; coarser figures (see its docstring).
* ``save_checkpoint`` / ``restore_latest`` (``checkpoints``): ``checkpoint_saved`` / ``checkpoint_restored``
  events with duration and bytes on disk.
"""

from __future__ import annotations

import importlib
from typing import Any

from ringscope.agent.tf_distribute.identity import WorkerIdentity, replica_ranks, worker_identity

_LAZY: dict[str, str] = {
    "TimedStepRunner": "ringscope.agent.tf_distribute.loop",
    "StepResult": "ringscope.agent.tf_distribute.loop",
    "ReplicaTiming": "ringscope.agent.tf_distribute.loop",
    "RingscopeCallback": "ringscope.agent.tf_distribute.keras_callback",
    "save_checkpoint": "ringscope.agent.tf_distribute.checkpoints",
    "restore_latest": "ringscope.agent.tf_distribute.checkpoints",
    "checkpoint_bytes": "ringscope.agent.tf_distribute.checkpoints",
    "start_agent": "ringscope.agent.tf_distribute.runtime",
    "strategy_ranks": "ringscope.agent.tf_distribute.runtime",
}


def __getattr__(name: str) -> Any:
    """Import the TF-dependent parts on first use, so that importing this package stays cheap."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ringscope.agent.tf_distribute' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)


__all__ = [
    "ReplicaTiming",
    "RingscopeCallback",
    "StepResult",
    "TimedStepRunner",
    "WorkerIdentity",
    "checkpoint_bytes",
    "replica_ranks",
    "restore_latest",
    "save_checkpoint",
    "start_agent",
    "strategy_ranks",
    "worker_identity",
]
