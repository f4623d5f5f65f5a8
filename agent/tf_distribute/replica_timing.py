"""In-graph timing of each replica's step for scripts Ringscope did not write: Keras ``fit`` and custom loops.

What it owns: a wrapper for the function a script (or Keras's ``fit``) passes to ``strategy.run`` inside a
``tf.function``, a hook on ``ReplicaContext.all_reduce``, and the collector the stamps reach. Per replica and step,
with the definitions of ``ringscope.agent.tf_distribute.loop`` (and of DDP):

    t_in  the replica's step function starts running (a stamp with no input: the graph reaches it at once)
    t0    its batch tensors exist (a stamp after the ops that produce them)
    t1    the gradients handed to an all-reduce exist          } once per all-reduce in the step;
    t2    the all-reduced gradients exist                      } comm = the sum of t2 - t1
    t3    the step function's outputs (and the last t2) exist

    data_wait_s    = t0 - t_in       waiting for the batch inside the graph (Keras fetches it there; a prefetched
                                      batch is ~0). A custom loop that calls ``next(iterator)`` before the step adds
                                      its host wait (``ringscope.agent.inject.tf_patch``).
    comm_s         = sum(t2 - t1)    wall time in the all-reduces, waiting for the slowest replica included.
    comm_exposed_s = comm_s          MirroredStrategy / MultiWorkerMirroredStrategy all-reduce the gradient list as
                                      one packed collective after the whole backward pass: nothing computes while
                                      it runs (unlike DDP's bucketed overlap), so all of it is exposed.
    compute_s      = (t3 - t0) - comm_s   forward, backward and the step's other graph work up to its outputs.

The optimizer's variable updates after the all-reduce run in parallel with the step's last ops and are not waited
for by t3 (no edge is added into the user's work); what they take beyond t3 shows as *other* (step - data - compute
- comm). With ``steps_per_execution = k`` each execution delivers k stamps per replica and the record of that
execution carries their sums (one record per execution, as ``RingscopeCallback`` numbers them).

Each replica's step adds its figures to one row of a host-resident table (``StampCollector``) with one scatter-add,
a host op whose inputs are host timestamps, so it adds no device synchronization (on GPU, the stamps mark when the
ops they follow were *enqueued* or completed, as ``loop`` explains; ``benchmarks/gpu_check_tf.py`` compares them
with host timing there). The step hooks read the table once after each step's call and keep the difference.

Every timestamp is an independent side effect (``loop._timestamp``): only the edges written here order it, and
none of them points into the user's computation. XLA-compiled functions (``jit_compile=True``)
cannot run host ops: they are left alone and said so once.

It must never raise into the training: every failure while tracing turns the timing off for that function, with one
line on stderr through ``ringscope.agent.inject.guard`` where the injection is active, and the step runs unchanged.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.framework import config as op_config
from tensorflow.python.framework.func_graph import FuncGraph
from tensorflow.python.ops import control_flow_util, resource_variable_ops

from ringscope.agent.tf_distribute.loop import _timestamp as _independent_timestamp

MAX_LOCAL_REPLICAS: Final[int] = 64
"""Replicas of one process that are timed (more is unheard of: 8 GPUs a node is the norm); others go unmeasured."""
_COLUMNS: Final[int] = 5  # steps, data wait, compute, comm, steps without a compute/comm split

_TLS = threading.local()
_HOOK_MARK: Final[str] = "_ringscope_replica_timing"


@dataclass(slots=True)
class ReplicaFigures:
    """One replica's figures summed over the steps delivered since the last ``take`` (seconds)."""

    steps: int = 0
    data_wait_s: float = 0.0
    compute_s: float | None = 0.0
    comm_s: float | None = 0.0


@dataclass(slots=True)
class _Frame:
    """The replica step being traced on this thread: the all-reduces seen in it."""

    comm: list[tuple[Any, Any]] = field(default_factory=list)
    depth: int = 0


class StampCollector:
    """Per-replica sums kept in the graph, read by the step hooks: one host-resident variable of
    ``MAX_LOCAL_REPLICAS`` rows (steps, data wait, compute, comm, steps without a split), to which each replica's
    step adds its row with one ``ResourceScatterAdd``. Nothing calls Python inside the graph (a ``numpy_function``
    per replica and step cost ~150 µs each on the 1.6 ms digits step), and the host reads the whole table once per
    step (``take``), after the step's call returned: the adds depend only on host timestamps, so on GPU the read
    waits for no kernel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: Any = None
        self._ranks: dict[int, int] = {}  # row -> global rank
        self._last: Any = None

    def row_for(self, rank: int, local_index: int) -> Any:
        """The table (created on first use, outside any graph) for a replica traced now; remembers its rank."""
        if not 0 <= local_index < MAX_LOCAL_REPLICAS:
            raise ValueError(f"local replica {local_index} beyond the {MAX_LOCAL_REPLICAS} Ringscope times")
        with self._lock:
            if self._table is None:
                with tf.init_scope(), tf.device("/cpu:0"):
                    # ResourceVariable directly: not through the strategy's variable creator (no mirroring)
                    self._table = resource_variable_ops.ResourceVariable(
                        tf.zeros([MAX_LOCAL_REPLICAS, _COLUMNS], tf.float64), trainable=False,
                        name="ringscope_replica_timing")
                    self._last = np.zeros([MAX_LOCAL_REPLICAS, _COLUMNS])
            self._ranks[local_index] = rank
            return self._table

    def clear(self) -> None:
        """Forget what arrived so far (steps that were not counted, such as those before ``fit`` began)."""
        if self._table is not None:
            self._last = self._table.numpy()

    def take(self) -> dict[int, ReplicaFigures]:
        """The sums added since the last call, per global rank (ranks with no step since then are left out)."""
        if self._table is None:
            return {}
        now = self._table.numpy()
        delta, self._last = now - self._last, now
        figures: dict[int, ReplicaFigures] = {}
        for row, rank in list(self._ranks.items()):
            steps, data_wait, compute, comm, unsplit = delta[row]
            if steps < 0.5:
                continue
            split = unsplit < 0.5
            figures[rank] = ReplicaFigures(round(steps), max(0.0, float(data_wait)),
                                           max(0.0, float(compute)) if split else None,
                                           max(0.0, float(comm)) if split else None)
        return figures


COLLECTOR: Final = StampCollector()
"""The process's collector: the zero-code patches deliver to it, ``RingscopeCallback`` and the loop timing take."""


# ---- Public API --------------------------------------------------------------------------------------------------

def timed_replica_fn(fn: Callable[..., Any], on_error: Callable[[str, BaseException], None]) -> Callable[..., Any]:
    """``fn`` (the function given to ``strategy.run``) stamped as described in the module docstring.

    Call it only while tracing a ``tf.function`` where ``untimed_reason()`` is None. ``on_error(where, exc)`` is told
    of a failure while tracing; the step then runs untimed.
    """

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        try:
            rank = _replica_rank()
            t_in = _timestamp()
            with tf.control_dependencies(_producers((args, kwargs))):
                t0 = _timestamp()
        except Exception as exc:
            on_error("replica step timing", exc)
            return fn(*args, **kwargs)
        frame = _Frame()
        stack = _frames()
        stack.append(frame)
        try:
            outputs = fn(*args, **kwargs)
        finally:
            stack.pop()
        try:
            _deliver_after(rank, t_in, t0, frame, outputs)
        except Exception as exc:
            on_error("replica step timing", exc)
        return outputs

    return timed


def untimed_reason() -> str | None:
    """Why the replica step being traced now cannot be timed (said once on stderr by the caller), or None."""
    if op_config.is_op_determinism_enabled():
        return "op determinism is enabled: tf.timestamp refuses to run under it"
    if _in_xla_function():
        return "the step function is XLA-compiled (jit_compile=True): host timestamps cannot run in it"
    return None


def install_all_reduce_hook() -> None:
    """Stamp t1 / t2 around ``ReplicaContext.all_reduce`` while a timed replica step is traced (once per process).

    Outside a timed step (``TimedStepRunner``, evaluation, other code) the original runs untouched.
    """
    base = distribute_lib.ReplicaContextBase
    original = base.all_reduce
    if getattr(original, _HOOK_MARK, False):
        return

    @functools.wraps(original)
    def all_reduce(self: Any, reduce_op: Any, value: Any, options: Any = None) -> Any:
        stack = _frames()
        if not stack or stack[-1].depth:  # not in a timed step, or an all-reduce inside one (its gradient)
            return original(self, reduce_op, value, options)
        frame = stack[-1]
        if _in_xla_function():  # Keras's jit_compile=True step, called inside the timed replica function
            frame.comm.append((None, None))
            return original(self, reduce_op, value, options)
        try:
            with tf.control_dependencies(_producers(value)):
                t1 = _timestamp()
        except Exception:  # no stamp: this all-reduce goes unmeasured and the step's split becomes unknown
            frame.comm.append((None, None))
            return original(self, reduce_op, value, options)
        frame.depth += 1
        try:
            reduced = original(self, reduce_op, value, options)
        finally:
            frame.depth -= 1
        try:
            with tf.control_dependencies(_producers(reduced)):
                t2 = _timestamp()
            frame.comm.append((t1, t2))
        except Exception:
            frame.comm.append((None, None))
        return reduced

    setattr(all_reduce, _HOOK_MARK, True)
    base.all_reduce = all_reduce


# ---- Internals -----------------------------------------------------------------------------------------------------

def _timestamp() -> Any:
    """An independent ``tf.timestamp()`` in a ``tf.function``'s own graph; a plain one inside a control-flow branch
    (``steps_per_execution`` puts the step in a while loop and a cond), where ops marked independent are not run."""
    graph = tf.compat.v1.get_default_graph()
    if isinstance(getattr(graph, "outer_graph", None), FuncGraph):
        return tf.timestamp()
    return _independent_timestamp()


def _in_xla_function() -> bool:
    """True while tracing an XLA-compiled function (``jit_compile=True``): its steps cannot be timed here."""
    if tf.executing_eagerly():
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def _frames() -> list[_Frame]:
    return thread_list(_TLS, "frames")


def thread_list(tls: threading.local, name: str) -> list[Any]:
    """The list ``tls.<name>`` of the calling thread, created empty on first use."""
    value: list[Any] | None = getattr(tls, name, None)
    if value is None:
        value = []
        setattr(tls, name, value)
    return value


def _replica_rank() -> int:
    """The global replica id of the replica being traced: its rank (``identity.replica_ranks`` numbers alike)."""
    context = tf.distribute.get_replica_context()
    if context is None:
        raise RuntimeError("strategy.run's function is not traced in a replica context")
    value = tf.get_static_value(context.replica_id_in_sync_group)
    if value is None:
        raise RuntimeError("the replica id is not known while tracing")
    return int(value)


def _producers(structure: Any) -> list[Any]:
    """The distinct ops producing the tensors in ``structure``: one control edge per op, not per tensor (an edge
    from each of many gradient tensors cost milliseconds a step in ``loop``; one per producing op costs nothing)."""
    ops: dict[str, Any] = {}
    for leaf in tf.nest.flatten(structure, expand_composites=True):
        op = getattr(leaf, "op", None)
        if isinstance(leaf, tf.Tensor) and op is not None and not isinstance(leaf, tf.Variable):
            ops.setdefault(op.name, op)
    return list(ops.values())


def _deliver_after(rank: int, t_in: Any, t0: Any, frame: _Frame, outputs: Any) -> None:
    """The t3 stamp, and this replica's row added to the collector's table (``StampCollector``)."""
    measured = [pair for pair in frame.comm if pair[0] is not None]
    last_t2 = [measured[-1][1]] if measured else []
    with tf.control_dependencies([*_producers(outputs), t0, *last_t2]):
        t3 = _timestamp()
    zero = tf.constant(0.0, tf.float64)
    if measured and len(measured) == len(frame.comm):
        comm = tf.add_n([t2 - t1 for t1, t2 in measured])
        compute, unsplit = tf.maximum(zero, (t3 - t0) - comm), zero
    else:  # no all-reduce seen (or one unmeasured): compute and comm unknown
        comm, compute, unsplit = zero, zero, tf.constant(1.0, tf.float64)
    local_index = _local_index(rank)
    table = COLLECTOR.row_for(rank, local_index)
    row = tf.stack([tf.constant(1.0, tf.float64), tf.maximum(zero, t0 - t_in), compute, comm, unsplit])
    tf.raw_ops.ResourceScatterAdd(resource=table.handle, indices=tf.constant([local_index]),
                                  updates=tf.expand_dims(row, 0), name="ringscope_replica_timing")


def _local_index(rank: int) -> int:
    """The replica's position among this process's replicas (TF numbers a worker's replicas contiguously)."""
    strategy = tf.distribute.get_strategy()
    local = len(getattr(strategy.extended, "worker_devices", ()) or ()) or 1
    return rank % local
