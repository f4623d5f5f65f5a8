"""``RingscopeCallback``: step telemetry for ``model.fit`` users (no custom loop), with restore detection.

What it owns: host timestamps around Keras's batch hooks and events at train/epoch boundaries. It must never
block or synchronize the device beyond reading the loss Keras already hands to callbacks, and never raise into
``fit`` because telemetry failed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import keras

from ringscope.agent.runtime import Agent
from ringscope.agent.schema import EventKind
from ringscope.agent.tf_distribute.replica_timing import COLLECTOR, ReplicaFigures, phases


class RingscopeCallback(keras.callbacks.Callback):
    """Reports one ``Step`` per replica per batch hook of ``model.fit``, plus epoch and restore events.

    What the fit path **can** separate: ``step_s`` (host time from ``on_train_batch_begin`` to
    ``on_train_batch_end``), ``samples`` (global batch / replicas x steps per execution), ``loss`` (Keras's running
    mean over all replicas, the same figure for every replica), epochs, and restores by ``BackupAndRestore``
    (see below).

    What it **cannot** separate: ``data_wait_s``, ``compute_s``, ``comm_s`` and ``comm_exposed_s`` are sent as
    ``None`` (unknown, never 0). Keras fetches the batch *inside* its compiled train function, so the two hooks
    bracket data wait + forward/backward + all-reduce + update together; they fire once per
    ``steps_per_execution`` steps, so one record covers that many optimizer steps (``step`` is the number of the
    last one); and every replica of a process gets the same ``step_s`` because the hooks run once per process. A
    slow replica therefore shows only as a longer step on every replica, not as a smaller AllReduce stall. For
    per-replica data/compute/all-reduce figures write a custom loop with ``TimedStepRunner``. (A ``train_step``
    override that stamps ``tf.timestamp()`` after the batch tensors exist could split data wait from the rest,
    but it would still run Keras's own all-reduce inside ``apply_gradients`` unseparated; it is not provided.)

    Restores: put this callback *after* ``keras.callbacks.BackupAndRestore`` in the list. At the start of training
    it reports ``checkpoint_restored`` when the optimizer's step counter is already above 0 (weights restored
    before ``fit``, or by ``BackupAndRestore``), and at the first epoch when ``fit`` resumes past epoch 0.

    Args:
        telemetry: the process's agent (``ringscope.agent.tf_distribute.start_agent``), or None to do nothing.
        ranks: global ranks of this process's replicas (default ``telemetry.identity.ranks``).
        global_batch_size: samples per optimizer step over all replicas, to fill ``samples`` (None: unknown).
    """

    def __init__(
        self, telemetry: Agent | None, *, ranks: Sequence[int] | None = None, global_batch_size: int | None = None
    ) -> None:
        super().__init__()
        self._telemetry = telemetry
        self._ranks = list(ranks) if ranks is not None else (telemetry.identity.ranks if telemetry else [0])
        self._global_batch_size = global_batch_size
        self._begin_s = 0.0
        self._begin_batch = 0
        self._step = 0
        self._epoch: int | None = None
        self._restore_reported = False
        self._first_batch = True

    # ---- Keras hooks ---------------------------------------------------------------------------------------------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Start numbering at the optimizer's step counter; a counter above 0 means state was restored."""
        optimizer = getattr(self.model, "optimizer", None)
        iterations = int(optimizer.iterations.numpy()) if optimizer is not None else 0
        self._step = iterations
        self._first_batch = True
        if iterations > 0:
            self._report_restore(iterations, None, f"optimizer state restored at step {iterations}")

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Report the epoch; the first epoch above 0 in a ``fit`` means it resumed (e.g. ``BackupAndRestore``)."""
        if self._epoch is None and epoch > 0:
            self._report_restore(self._step, epoch, f"fit resumed at epoch {epoch}")
        self._epoch = epoch
        self._first_batch = True  # fit starts a new pass over its iterator: this batch includes its start-up
        self._safe_event(EventKind.EPOCH, step=self._step, epoch=epoch)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Remember when Keras handed control to its train function."""
        self._begin_s = time.time()
        self._begin_batch = batch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """One record per replica covering the steps this train-function call ran."""
        end_s = time.time()
        # Keras passes the first and last batch index of the call: their difference is the steps it ran.
        steps = max(1, batch - self._begin_batch + 1)
        self._step += steps
        if self._telemetry is None:
            return
        try:
            loss = _as_float((logs or {}).get("loss"))
            samples = None
            if self._global_batch_size is not None:
                samples = self._global_batch_size // len(self._ranks) * steps
            telemetry, step, begin_s, first, epoch = (self._telemetry, self._step - 1, self._begin_s,
                                                      self._first_batch, self._epoch)

            def emit(replicas: dict[int, ReplicaFigures]) -> None:
                for rank in self._ranks:
                    data_wait, compute, comm = phases(replicas.get(rank))
                    telemetry.step(rank, step, begin_s, end_s, data_wait_s=data_wait, compute_s=compute, comm_s=comm,
                                   comm_exposed_s=comm, samples=samples, loss=loss, first_batch=first, epoch=epoch)

            COLLECTOR.attach(telemetry)
            COLLECTOR.submit(begin_s, end_s, emit)
        except Exception:  # telemetry must never stop a training
            pass
        self._first_batch = False

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _report_restore(self, step: int, epoch: int | None, text: str) -> None:
        if self._restore_reported:
            return
        self._restore_reported = True
        self._safe_event(EventKind.CHECKPOINT_RESTORED, step=step, epoch=epoch, text=text)

    def _safe_event(self, kind: str, **fields: Any) -> None:
        if self._telemetry is None:
            return
        try:
            self._telemetry.event(kind, rank=self._ranks[0], **fields)
        except Exception:  # telemetry must never stop a training
            pass


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
