"""Checkpoint events for TensorFlow trainings: ``tf.train.CheckpointManager`` saves and restores, timed and sized.

What it owns: calling ``manager.save`` / ``checkpoint.restore`` for the user and reporting ``checkpoint_saved`` /
``checkpoint_restored`` events with the duration and the bytes the checkpoint occupies on disk. It must never
swallow a checkpoint error (a failed save is the user's problem to see), only telemetry errors.
"""

from __future__ import annotations

import glob
import os
import re
import time
from typing import Any

from ringscope.agent.runtime import Agent
from ringscope.agent.schema import EventKind


def checkpoint_bytes(prefix: str) -> int:
    """Bytes on disk of the checkpoint written at ``prefix`` (its ``.index`` and ``.data-*`` files)."""
    total = 0
    for path in glob.glob(glob.escape(prefix) + ".*"):
        try:
            total += os.path.getsize(path)
        except OSError:
            continue  # removed by a concurrent cleanup: it is no longer on disk
    return total


def save_checkpoint(
    manager: Any,
    telemetry: Agent | None,
    *,
    step: int,
    rank: int | None = None,
    epoch: int | None = None,
) -> str:
    """Save through ``manager`` (numbered ``step``), report ``checkpoint_saved``; return the checkpoint prefix.

    Under MultiWorkerMirroredStrategy every worker must call this (saving is collective); give non-chief workers
    a manager writing to a scratch directory, as TensorFlow's multi-worker guide does.
    """
    started = time.perf_counter()
    prefix: str = manager.save(checkpoint_number=step)
    duration = time.perf_counter() - started
    if telemetry is not None:
        size = checkpoint_bytes(prefix)
        telemetry.event(EventKind.CHECKPOINT_SAVED, rank=rank, step=step, duration_s=duration, bytes=size,
                        text=prefix, epoch=epoch)
    return prefix


def restore_latest(checkpoint: Any, manager: Any, telemetry: Agent | None, *, rank: int | None = None) -> int | None:
    """Restore ``checkpoint`` from ``manager.latest_checkpoint``; report ``checkpoint_restored``.

    Returns the restored checkpoint's number (the step it was saved at), or None when there was nothing to
    restore (a fresh start, nothing reported).
    """
    prefix = manager.latest_checkpoint
    if prefix is None:
        return None
    started = time.perf_counter()
    checkpoint.restore(prefix)
    duration = time.perf_counter() - started
    match = re.search(r"-(\d+)$", prefix)
    number = int(match.group(1)) if match else None
    if telemetry is not None:
        telemetry.event(EventKind.CHECKPOINT_RESTORED, rank=rank, step=number, duration_s=duration,
                        bytes=checkpoint_bytes(prefix), text=prefix)
    return number
