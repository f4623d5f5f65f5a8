"""The custom-training-loop helper: one timed, synchronous data-parallel step per call, reported per replica.

What it owns: a ``tf.function`` replica step that stamps ``tf.timestamp()`` (Unix seconds, the same clock as
``time.time()``) under control dependencies at four points, and the host-side timing of ``next(iterator)``::

    t0 before the tape | forward + backward | t1 gradients ready | all_reduce(SUM) | t2 reduced | apply | t3

Per replica and step it reports (definitions of shared MEASURING.md, identical to the DDP integration):

* ``data_wait_s``  host time blocked in ``next(iterator)`` of the distributed iterator (one pipeline per process,
  so all local replicas of a process share the figure; on GPU it includes the copy to device the iterator makes).
* ``compute_s``    ``(t1 - t0) + (t3 - t2)``: forward + backward + optimizer update of this replica.
* ``comm_s``       ``t2 - t1``: wall time inside ``ReplicaContext.all_reduce``. All-reduce is synchronous, so this
  includes waiting for the slowest replica to arrive.
* ``comm_exposed_s`` equal to ``comm_s``: here the all-reduce starts after the whole backward pass and nothing
  computes while it runs, so none of it is hidden (unlike DDP's bucketed overlap). That holds because
  ``ReplicaContext.all_reduce`` of the gradient list is one packed collective (MirroredStrategy's default
  ``bytes_per_pack=0``): it needs every gradient and delivers every reduced one at once, so the data dependencies
  alone put it between t1 and t2 and the update after t2; the timestamps add no control edge into the work.
* ``step_s``       host wall time from before ``next(iterator)`` until the step's results are on the host;
  other = step - data_wait - compute - comm_exposed is dispatch, tracing (first step) and host bookkeeping.

The timestamps must stay independent of each other. ``tf.timestamp`` is a stateful op without a resource input,
and ``tf.function``'s automatic control dependencies chain every such op in the order it was traced. Replicas are
traced one after another, so replica 1's t0 got a control input from replica 0's t1: with the t0 edge onto the
inputs, replica 1's forward pass waited for replica 0's whole backward pass (+2.75 ms, 8 % of a 34 ms CPU step),
and its t0 (hence every figure) was taken late. Each timestamp is therefore registered with the tracing graph's
automatic-control-dependency manager as an *independent* side effect (``run_independently``: it still runs before
the function returns, but no chain is added); only the explicit edges written here order it.
That chain also hid a missing edge: t3 waited only for a read of ``optimizer.iterations``, which Keras increments
with no ordering against the variable updates; t3 now waits for reads of every model and optimizer variable.

Gradients are all-reduced exactly once. Keras 3's ``optimizer.apply_gradients`` all-reduces again whenever it
runs in a replica context (``_all_reduce_sum_gradients``, no flag to skip it) and fails in a cross-replica
context, so the helper wraps that one method on the optimizer instance: while *this helper* applies its already
reduced gradients (a thread-local flag: MirroredStrategy runs replicas on threads) the gradients pass through
unchanged; every other caller still gets the normal reduction. The rest of the optimizer (schedules, clipping,
weight decay, slot variables, ``iterations``) is untouched. ``tests/agent/test_tf_distribute.py`` checks one update
against a hand-computed SGD step exactly, so a Keras change that breaks this shows up as a failing test.

On GPU, ``tf.timestamp()`` after a GPU op may mark when the op was enqueued rather than finished; validate with
``benchmarks/gpu_check_tf.py`` before trusting compute/comm splits there. This module must never synchronize
inside the step beyond what fetching the step's own results requires, and never raise because telemetry failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from ringscope.agent.runtime import Agent

LossFn = Callable[[Any, Any], Any]
"""``loss_fn(labels, predictions)`` -> per-example losses (a Keras loss with ``reduction=None`` fits)."""

_PREREDUCED = threading.local()
_WRAPPED_MARK = "_ringscope_prereduced_wrapper"


@dataclass(frozen=True, slots=True)
class ReplicaTiming:
    """One replica's figures for one step (seconds)."""

    rank: int
    compute_s: float
    comm_s: float
    comm_exposed_s: float
    samples: int
    loss: float


@dataclass(frozen=True, slots=True)
class StepResult:
    """What ``TimedStepRunner.run_step`` measured. ``loss`` is the mean over this process's replicas."""

    step: int
    start_s: float
    end_s: float
    data_wait_s: float
    first_batch: bool
    loss: float
    replicas: list[ReplicaTiming] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        """Host wall time of the whole step."""
        return self.end_s - self.start_s


class TimedStepRunner:
    """Runs timed training steps of ``model`` under ``strategy`` and reports them to ``telemetry``.

    Build it inside or outside ``strategy.scope()`` after the model and optimizer were created in the scope::

        runner = TimedStepRunner(strategy, model, optimizer, loss_fn, global_batch_size=64, telemetry=agent)
        iterator = iter(strategy.distribute_datasets_from_function(make_dataset))
        for _ in range(steps):
            result = runner.run_step(iterator)

    Args:
        strategy: a ``tf.distribute`` strategy (MirroredStrategy, MultiWorkerMirroredStrategy, or the default).
        model: a Keras model created in ``strategy.scope()``.
        optimizer: a Keras 3 optimizer created in ``strategy.scope()``.
        loss_fn: ``loss_fn(labels, predictions)`` -> per-example losses.
        global_batch_size: samples per step over all replicas (the loss is averaged over it, as TF recommends).
        telemetry: the agent to report to (``start_agent``), or None to only time.
        ranks: global rank of each local replica; default: ``telemetry.identity.ranks`` or ``0..n-1``.
        first_step: number of the first step (a resumed run continues its numbering).
    """

    def __init__(
        self,
        strategy: Any,
        model: Any,
        optimizer: Any,
        loss_fn: LossFn,
        *,
        global_batch_size: int,
        telemetry: Agent | None = None,
        ranks: Sequence[int] | None = None,
        first_step: int = 0,
    ) -> None:
        if global_batch_size < 1:
            raise ValueError(f"global_batch_size must be at least 1, got {global_batch_size}")
        self._strategy = strategy
        self._model = model
        self._optimizer = optimizer
        self._loss_fn = loss_fn
        self._global_batch_size = global_batch_size
        self._telemetry = telemetry
        local = len(strategy.extended.worker_devices)
        if ranks is None:
            ranks = telemetry.identity.ranks if telemetry is not None else range(local)
        self.ranks = list(ranks)
        if len(self.ranks) != local:
            raise ValueError(
                f"ranks lists {len(self.ranks)} rank(s) {self.ranks} but this process runs {local} replica(s); "
                "give one global rank per local replica"
            )
        self.step = first_step
        self._last_iterator: Iterator[Any] | None = None
        install_prereduced_apply(optimizer)
        self._step_fn = tf.function(self._distributed_step)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def run_step(self, iterator: Iterator[Any], *, epoch: int | None = None) -> StepResult:
        """Take the next batch from ``iterator`` (a distributed iterator), train on it, report, return figures.

        Raises ``StopIteration`` when the iterator is exhausted (nothing is reported for that call).
        """
        first_batch = iterator is not self._last_iterator
        start_s = time.time()
        batch = next(iterator)
        got_s = time.time()
        self._last_iterator = iterator
        # Fetching the step's results is its only synchronization point: one small [replicas, 6] array, stacked in
        # the graph so that the host makes a single device-to-host fetch, not one per replica.
        rows = self._step_fn(batch).numpy().tolist()
        end_s = time.time()
        # t1 (gradients ready) and t2 (all-reduce done) come from timestamp ops ordered by control dependencies;
        # when the collective is nearly free (one replica) TF may run them a few µs out of order: a wait is never
        # negative, and that overlap stays in compute
        replicas = [
            ReplicaTiming(rank, (t1 - t0) + (t3 - t2), max(0.0, t2 - t1), max(0.0, t2 - t1), int(samples), loss)
            for rank, (t0, t1, t2, t3, samples, loss) in zip(self.ranks, rows, strict=True)
        ]
        result = StepResult(
            step=self.step,
            start_s=start_s,
            end_s=end_s,
            data_wait_s=got_s - start_s,
            first_batch=first_batch,
            loss=sum(r.loss for r in replicas) / len(replicas),
            replicas=replicas,
        )
        self._report(result, epoch)
        self.step += 1
        return result

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _report(self, result: StepResult, epoch: int | None) -> None:
        if self._telemetry is None:
            return
        try:
            for replica in result.replicas:
                self._telemetry.step(
                    replica.rank,
                    result.step,
                    result.start_s,
                    result.end_s,
                    data_wait_s=result.data_wait_s,
                    compute_s=replica.compute_s,
                    comm_s=replica.comm_s,
                    comm_exposed_s=replica.comm_exposed_s,
                    samples=replica.samples,
                    loss=replica.loss,
                    first_batch=result.first_batch,
                    epoch=epoch,
                )
        except Exception:  # telemetry must never stop a training
            pass

    def _distributed_step(self, batch: Any) -> Any:
        features, labels = batch
        outputs = self._strategy.run(self._replica_step, args=(features, labels))
        # This process's replicas only (no collective): rows in the order of ``self.ranks``.
        return tf.stack(self._strategy.experimental_local_results(outputs))

    def _replica_step(self, features: Any, labels: Any) -> Any:
        context = tf.distribute.get_replica_context()
        variables = self._model.trainable_variables
        t0 = _timestamp()
        # One control edge, onto the inputs: the forward pass starts after t0 through its data, instead of every
        # forward and gradient op getting a control input from t0 (control edges can block graph rewrites).
        with tf.control_dependencies([t0]):
            features = tf.nest.map_structure(tf.identity, features)
        with tf.GradientTape() as tape:
            predictions = self._model(features, training=True)
            per_example = self._loss_fn(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self._global_batch_size)
            if self._model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self._model.losses))
        grads = tape.gradient(loss, variables)
        present = [g for g in grads if g is not None]
        # The timestamps observe; nothing waits for them: the all-reduce does not depend on t1 nor the update on t2
        # (data dependencies already order them). t2 waits for the *ops* that produce the reduced gradients (one
        # IdentityN per replica here), not for each reduced tensor: a control edge from every reduced gradient cost
        # ~3-6 ms of a ~40 ms CPU step (4.2 M parameters), one edge per producing op costs nothing measurable. The
        # cause was not pinned down then; it was measured while the timestamps were still chained (module docstring).
        with tf.control_dependencies(present):
            t1 = _timestamp()
        reduced_present = context.all_reduce(tf.distribute.ReduceOp.SUM, present)
        with tf.control_dependencies(list({t.op.name: t.op for t in reduced_present}.values())):
            t2 = _timestamp()
        reduced_iter = iter(reduced_present)
        reduced = [None if g is None else next(reduced_iter) for g in grads]
        _PREREDUCED.active = True
        try:
            self._optimizer.apply_gradients([(g, v) for g, v in zip(reduced, variables, strict=True) if g is not None])
        finally:
            _PREREDUCED.active = False
        # t3 waits for every write of the update: automatic control dependencies put a read of a variable after the
        # last write to it, so this replica's reads of all model and optimizer variables (no copy on CPU) come after
        # its updates. Reading only the step counter is not enough: Keras increments it with no ordering against the
        # variable updates (other resources), which let t3 run before them. The edge from t2 keeps t2 <= t3.
        written = [tf.identity(v) for v in [*variables, *self._optimizer.variables]]
        with tf.control_dependencies([t2, tf.group(written)]):
            t3 = _timestamp()
        samples = tf.cast(tf.shape(per_example)[0], tf.float64)
        loss_mean = tf.cast(tf.reduce_mean(per_example), tf.float64)
        return tf.stack([t0, t1, t2, t3, samples, loss_mean])


def _timestamp() -> Any:
    """``tf.timestamp()`` that automatic control dependencies leave unchained (see the module docstring).

    Only the control edges the caller writes order it. Outside a ``tf.function`` trace (eager, or a graph without
    automatic control dependencies) there is no chain to avoid and this is plain ``tf.timestamp()``.
    """
    stamp = tf.timestamp()
    if not tf.executing_eagerly():
        manager = getattr(tf.compat.v1.get_default_graph(), "experimental_acd_manager", None)
        if manager is not None:
            manager.run_independently(stamp.op)
    return stamp


def install_prereduced_apply(optimizer: Any) -> None:
    """Let ``TimedStepRunner`` apply already all-reduced gradients with ``optimizer`` without a second reduction.

    Wraps the optimizer's ``_all_reduce_sum_gradients`` (Keras 3, TensorFlow backend) on this instance only: while
    the runner applies (a thread-local flag is set) gradients pass through; otherwise the original runs. Raises
    ``TypeError`` naming the optimizer when it has no such method (not a Keras 3 TF optimizer).
    """
    original = getattr(optimizer, "_all_reduce_sum_gradients", None)
    if original is None:
        raise TypeError(
            f"{type(optimizer).__name__} has no _all_reduce_sum_gradients: TimedStepRunner needs a Keras 3 "
            "optimizer on the TensorFlow backend (tf.keras.optimizers.*) to apply pre-reduced gradients once"
        )
    if getattr(original, _WRAPPED_MARK, False):
        return

    def all_reduce_unless_prereduced(grads_and_vars: Any) -> Any:
        if getattr(_PREREDUCED, "active", False):
            return list(grads_and_vars)
        return original(grads_and_vars)

    setattr(all_reduce_unless_prereduced, _WRAPPED_MARK, True)
    optimizer._all_reduce_sum_gradients = all_reduce_unless_prereduced
