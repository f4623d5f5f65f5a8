"""Who a TensorFlow worker process is, read from ``TF_CONFIG``; which global ranks its replicas get.

Pure Python on purpose (no tensorflow import): a launcher and the tests use it without paying TF's import cost.
It must never guess silently: a ``TF_CONFIG`` that cannot be read is an error naming the value seen.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

ENV_TF_CONFIG = "TF_CONFIG"

# Task types that run replicas, in the order TensorFlow numbers MultiWorker replicas (chief first, then workers).
_REPLICA_TASK_TYPES = ("chief", "worker")


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """One process's place in a TF cluster.

    Attributes:
        task_type: ``"chief"``, ``"worker"``... or None without ``TF_CONFIG`` (a single-process MirroredStrategy).
        task_index: index within its task type.
        worker_rank: position among all replica-running tasks (chief first), i.e. the worker's rank.
        num_workers: number of replica-running tasks in the cluster (1 without ``TF_CONFIG``).
        is_chief: true for the task that writes the real checkpoints (chief, or worker 0 when there is no chief).
    """

    task_type: str | None
    task_index: int
    worker_rank: int
    num_workers: int
    is_chief: bool


def worker_identity(tf_config: str | None = None) -> WorkerIdentity:
    """Parse ``TF_CONFIG`` (the argument, else the environment variable) into a ``WorkerIdentity``.

    Raises ``ValueError`` naming the problem when ``TF_CONFIG`` is set but not a usable cluster description.
    """
    raw = tf_config if tf_config is not None else os.environ.get(ENV_TF_CONFIG, "")
    if not raw.strip():
        return WorkerIdentity(None, 0, 0, 1, True)
    try:
        config = json.loads(raw)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        task_type = str(task["type"])
        task_index = int(task.get("index", 0))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(
            f"TF_CONFIG is not a valid cluster description ({type(exc).__name__}: {exc}); expected JSON like "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}, got '
            f"{raw[:200]!r}"
        ) from None
    counts = {kind: len(cluster.get(kind, [])) for kind in _REPLICA_TASK_TYPES}
    num_workers = sum(counts.values())
    if task_type not in _REPLICA_TASK_TYPES:
        # An evaluator or parameter server runs no training replicas; give it a rank outside the training ranks.
        return WorkerIdentity(task_type, task_index, num_workers, max(num_workers, 1), False)
    if not 0 <= task_index < counts[task_type]:
        raise ValueError(
            f"TF_CONFIG task index {task_index} is outside the cluster's {counts[task_type]} {task_type!r} "
            "address(es); fix task.index or the cluster list"
        )
    worker_rank = task_index + (counts["chief"] if task_type == "worker" else 0)
    is_chief = task_type == "chief" or (counts["chief"] == 0 and task_index == 0)
    return WorkerIdentity(task_type, task_index, worker_rank, num_workers, is_chief)


def replica_ranks(worker_rank: int, local_replicas: int) -> list[int]:
    """Global ranks of one worker's replicas: ``worker_rank * local_replicas + i`` (TF's replica numbering)."""
    if local_replicas < 1:
        raise ValueError(f"a worker has at least one replica, got local_replicas={local_replicas}")
    return [worker_rank * local_replicas + i for i in range(local_replicas)]
