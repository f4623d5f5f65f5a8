"""``agent.start`` with the identity of a ``tf.distribute`` strategy: one agent per process, one rank per replica.

MirroredStrategy is one process driving several devices: its agent's ``Hello.ranks`` lists every replica.
MultiWorkerMirroredStrategy runs one process per worker: identity comes from ``TF_CONFIG`` (task -> worker rank),
world size = workers x local replicas. This module reads the strategy's public attributes only; it must never
change the strategy or run a TF op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ringscope import agent
from ringscope.agent.runtime import Agent
from ringscope.agent.tf_distribute.identity import WorkerIdentity, replica_ranks, worker_identity


def strategy_name(strategy: Any) -> str:
    """The schema's strategy name for a ``tf.distribute`` strategy."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker_mirrored"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "mirrored"
    return "single" if strategy.num_replicas_in_sync == 1 else "other"


def strategy_ranks(strategy: Any, identity: WorkerIdentity | None = None) -> tuple[list[int], int, WorkerIdentity]:
    """(global ranks of this process's replicas, world size, worker identity) for ``strategy``."""
    local = len(strategy.extended.worker_devices)
    if strategy_name(strategy) != "multi_worker_mirrored":
        identity = WorkerIdentity(None, 0, 0, 1, True)
    elif identity is None:
        identity = worker_identity()
    ranks = replica_ranks(identity.worker_rank, local)
    world = strategy.num_replicas_in_sync
    if ranks[-1] >= world:
        raise ValueError(
            f"TF_CONFIG puts this worker at rank {identity.worker_rank} with {local} local replica(s), but the "
            f"strategy has only {world} replicas in sync; is TF_CONFIG the one the strategy was built with?"
        )
    return ranks, world, identity


def start_agent(strategy: Any, *, backend: str | None = None, **start_kwargs: Any) -> Agent:
    """Start an agent describing this process's replicas of ``strategy``. Extra arguments go to ``agent.start``.

    Hello fields: ``rank`` = this process's first replica, ``local_rank`` = 0, ``node_rank`` = worker rank,
    ``ranks`` = one global rank per local replica, ``devices`` = one entry per replica with its TF device name.
    """
    ranks, world, identity = strategy_ranks(strategy)
    devices: Sequence[str] = strategy.extended.worker_devices
    described = [
        {"rank": rank, "device": name, "kind": tf.DeviceSpec.from_string(name).device_type or "CPU"}
        for rank, name in zip(ranks, devices, strict=True)
    ]
    return agent.start(
        framework="tensorflow",
        strategy=strategy_name(strategy),
        rank=ranks[0],
        local_rank=0,
        world_size=world,
        ranks=ranks,
        node_rank=identity.worker_rank,
        backend=backend if backend is not None else _backend_of(strategy),
        devices=described,
        **start_kwargs,
    )


def _backend_of(strategy: Any) -> str | None:
    # The cross-device ops class is the closest thing TF has to a "backend" (ring/NCCL collectives, reduce-to-one).
    ops = getattr(strategy.extended, "_cross_device_ops", None)
    if strategy_name(strategy) == "multi_worker_mirrored":
        return "collective"
    return type(ops).__name__ if ops is not None else None
