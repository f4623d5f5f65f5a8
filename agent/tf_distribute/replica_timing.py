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
- comm). A call that runs k steps (``steps_per_execution = k``, or a ``tf.range`` loop around ``strategy.run``)
delivers k rows per replica, and the record of that call carries their sums.

Each replica's step writes its row to its own host-resident ring (``StampCollector``) with one scatter, host ops
whose inputs are host timestamps, so they add no device synchronization (on GPU, the stamps mark when the ops they
follow were *enqueued* or completed, as ``loop`` explains; ``benchmarks/gpu_check_tf.py`` compares them with host
timing there). The step hooks only queue the host step; the agent's sender thread reads the rings.

Every timestamp is an independent side effect (``loop._timestamp``): only the edges written here order it, and
none of them points into the user's computation. XLA-compiled functions (``jit_compile=True``)
cannot run host ops: they are left alone and said so once.

It must never raise into the training: every failure while tracing turns the timing off for that function, with one
line on stderr through ``ringscope.agent.inject.guard`` where the injection is active, and the step runs unchanged.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.framework import config as op_config
from tensorflow.python.framework.func_graph import FuncGraph
from tensorflow.python.ops import control_flow_util, resource_variable_ops

from ringscope.agent.profiling import StepProfiler
from ringscope.agent.tf_distribute.loop import _timestamp as _independent_timestamp

if TYPE_CHECKING:
    from ringscope.agent.runtime import Agent

MAX_LOCAL_REPLICAS: Final[int] = 64
"""Replicas of one process that are timed (more is unheard of: 8 GPUs a node is the norm); others go unmeasured."""
RING_SLOTS: Final[int] = 512
"""Steps each replica's ring holds between two reads (the sender reads every 50 ms: 10 kHz steps fit)."""
MAX_PENDING: Final[int] = 4096
"""Host steps waiting for their stamps at most (~80 flush intervals of 1 ms steps)."""
_COLUMNS: Final[int] = 5  # t_in, t0, t3, comm, 1 when the step has no compute/comm split

_TLS = threading.local()
_HOOK_MARK: Final[str] = "_ringscope_replica_timing"


@dataclass(frozen=True, slots=True)
class ReplicaFigures:
    """One replica's figures summed over the timed steps inside one host step (seconds; None: no compute/comm
    split, an all-reduce went unmeasured)."""

    data_wait_s: float
    compute_s: float | None
    comm_s: float | None


def phases(figures: ReplicaFigures | None, host_wait_s: float | None = None
           ) -> tuple[float | None, float | None, float | None]:
    """(data wait, compute, comm) of one rank's record: the host's wait before the call (a custom loop's eager
    ``next(iterator)``) plus the in-graph wait; compute and comm unknown without figures."""
    if figures is None:
        return host_wait_s, None, None
    return (host_wait_s or 0.0) + figures.data_wait_s, figures.compute_s, figures.comm_s


Emit = Callable[[dict[int, ReplicaFigures]], None]
"""Turns a host step into records, given its figures per global rank (ranks without a timed step left out)."""


@dataclass(slots=True)
class _HostStep:
    start_s: float
    end_s: float
    emit: Emit


@dataclass(slots=True)
class _Ring:
    """One local replica's stamps: slot ``n % RING_SLOTS`` holds its n-th timed step; ``counter`` counts them."""

    rank: int
    counter: Any
    table: Any
    seen: int = 0  # steps already read
    rows: deque[list[float]] = field(default_factory=deque)  # read, not yet matched to a host step


@dataclass(slots=True)
class _Frame:
    """The replica step being traced on this thread: the all-reduces seen in it."""

    comm: list[tuple[Any, Any]] = field(default_factory=list)
    depth: int = 0


class StampCollector:
    """Where the replica stamps go, and how they become records, off the training thread.

    Each local replica has a ring of ``RING_SLOTS`` rows (t_in, t0, t3, comm, unsplit) and a step counter, both
    host-resident variables: its step writes its row with one ``ResourceScatterUpdate`` and then counts it. Nothing
    calls Python inside the graph, and the training thread never reads the variables (a read right after the step
    waits for the step's tail: ~40-90 µs, 5 % of the 1.6 ms digits step). The step hooks hand each finished host
    step to ``submit`` (an append), and ``drain``, on the agent's sender thread every flush interval, reads the rings
    and gives every host step the stamps whose [t_in, t3] lies inside its [start, end]: a step function call that
    returned has written its rows, so a host step queued before the read is complete. The figures are those rows
    summed (``steps_per_execution`` or several ``strategy.run`` per call: one record, their sums).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # ring creation (tracing thread) and drain (sender thread, or close)
        self._rings: dict[int, _Ring] = {}  # local replica index -> its ring
        self._pending: deque[_HostStep] = deque()
        self._senders: set[int] = set()  # ids of the agents whose sender thread drains this collector
        self.profiler: StepProfiler | None = None  # profiles on demand (set at the first attach)
        self.overwritten = 0  # rows lost because a ring filled before it was read (the sender was starved)

    def ring_for(self, rank: int, local_index: int) -> _Ring:
        """The ring (created on first use, outside any graph) of a replica being traced now."""
        if not 0 <= local_index < MAX_LOCAL_REPLICAS:
            raise ValueError(f"local replica {local_index} beyond the {MAX_LOCAL_REPLICAS} Ringscope times")
        with self._lock:
            ring = self._rings.get(local_index)
            if ring is None:
                with tf.init_scope(), tf.device("/cpu:0"):
                    # ResourceVariable directly: not through the strategy's variable creator (no mirroring)
                    ring = _Ring(rank, resource_variable_ops.ResourceVariable(
                        tf.constant(0, tf.int64), trainable=False, name=f"ringscope_steps_{local_index}"),
                        resource_variable_ops.ResourceVariable(
                            tf.zeros([RING_SLOTS, _COLUMNS], tf.float64), trainable=False,
                            name=f"ringscope_stamps_{local_index}"))
                self._rings[local_index] = ring
            ring.rank = rank
            return ring

    def attach(self, agent: Agent) -> None:
        """Have ``agent``'s sender thread drain this collector every flush interval (once per agent), and let a
        collector ask it for profiles (TensorFlow's profiler is process-wide: one per process)."""
        if id(agent) not in self._senders and agent.add_producer(self.drain):
            self._senders.add(id(agent))
            from ringscope.agent.tf_distribute.profiling import TfProfiler

            self.profiler = StepProfiler(agent, agent.identity.rank, TfProfiler())
            agent.set_profiler(self.profiler.request)

    def submit(self, start_s: float, end_s: float, emit: Emit) -> None:
        """A host step ran from ``start_s`` to ``end_s``: ``emit`` gets its figures at the next ``drain`` (at once,
        with none, when no replica step was ever timed). Bounded: past ``MAX_PENDING`` waiting steps (nobody drains:
        telemetry off, or a sender that died) the oldest is emitted without figures."""
        profiler = self.profiler
        if profiler is not None and profiler.armed:  # a profile on demand starts or ends at this step end
            profiler.at_step_end(0)
        if not self._rings:
            emit({})
            return
        self._pending.append(_HostStep(start_s, end_s, emit))
        if len(self._pending) > MAX_PENDING:
            _emit(self._pending.popleft(), {})

    def drain(self) -> None:
        """Match the host steps queued so far with the stamps, and emit them (sender thread; ``close`` at exit)."""
        with self._lock:
            count = len(self._pending)
            if not count:
                return
            rings = list(self._rings.values())
            for ring in rings:
                self._read(ring)
            for _ in range(count):
                host = self._pending.popleft()
                figures: dict[int, ReplicaFigures] = {}
                for ring in rings:
                    summed = _sum_inside(ring.rows, host.start_s, host.end_s)
                    if summed is not None:
                        figures[ring.rank] = summed
                _emit(host, figures)

    def _read(self, ring: _Ring) -> None:
        counter = int(tf.raw_ops.ReadVariableOp(resource=ring.counter.handle, dtype=tf.int64).numpy())
        if counter == ring.seen:
            return
        # The counter first: every row below it is written (the step writes its row, then counts it).
        table = tf.raw_ops.ReadVariableOp(resource=ring.table.handle, dtype=tf.float64).numpy().tolist()
        first = max(ring.seen, counter - RING_SLOTS)
        self.overwritten += first - ring.seen
        ring.rows.extend(table[n % RING_SLOTS] for n in range(first, counter))
        ring.seen = counter
        while len(ring.rows) > RING_SLOTS:  # rows no host step claimed (steps outside any measured window)
            ring.rows.popleft()


def _emit(host: _HostStep, figures: dict[int, ReplicaFigures]) -> None:
    try:
        host.emit(figures)
    except Exception:  # a record that cannot be built is lost, never the others
        pass


def _sum_inside(rows: deque[list[float]], start_s: float, end_s: float) -> ReplicaFigures | None:
    """Pop and sum the rows (oldest first) whose step ran inside [start_s, end_s]; older ones are dropped."""
    while rows and rows[0][0] < start_s:
        rows.popleft()
    steps, data_wait, span, comm, split = 0, 0.0, 0.0, 0.0, True
    while rows and rows[0][2] <= end_s:
        t_in, t0, t3, row_comm, unsplit = rows.popleft()
        steps += 1
        data_wait += max(0.0, t0 - t_in)
        span += t3 - t0
        comm += row_comm
        split = split and unsplit < 0.5
    if not steps:
        return None
    return ReplicaFigures(data_wait, max(0.0, span - comm) if split else None, max(0.0, comm) if split else None)


COLLECTOR: Final = StampCollector()
"""The process's collector: the zero-code stamps go to it; ``RingscopeCallback`` and the loop timing submit to it."""


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
    """An independent ``tf.timestamp()`` on the replica's host in a ``tf.function``'s own graph; a plain one inside a
    control-flow branch (``steps_per_execution`` puts the step in a while loop and a cond), where ops marked
    independent are not run."""
    graph = tf.compat.v1.get_default_graph()
    with tf.device("/cpu:0"):
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
    """The t3 stamp, and this replica's row (t_in, t0, t3, comm, unsplit) written to its ring, then counted
    (``StampCollector``): host ops only, none on the user's path; the sums and clamps are the sender thread's."""
    measured = [pair for pair in frame.comm if pair[0] is not None]
    last_t2 = [measured[-1][1]] if measured else []
    with tf.control_dependencies([*_producers(outputs), t0, *last_t2]):
        t3 = _timestamp()
    with tf.device("/cpu:0"):  # the replica's host: arithmetic on a GPU would copy the stamps there and back
        if measured and len(measured) == len(frame.comm):
            comm, unsplit = tf.add_n([t2 - t1 for t1, t2 in measured]), 0.0
        else:  # no all-reduce seen (or one unmeasured): compute and comm unknown
            comm, unsplit = tf.constant(0.0, tf.float64), 1.0
        ring = COLLECTOR.ring_for(rank, _local_index(rank))
        count = tf.raw_ops.ReadVariableOp(resource=ring.counter.handle, dtype=tf.int64)
        row = tf.stack([t_in, t0, t3, comm, tf.constant(unsplit, tf.float64)])
        written = tf.raw_ops.ResourceScatterUpdate(resource=ring.table.handle, indices=count % RING_SLOTS,
                                                   updates=row, name="ringscope_replica_timing")
        with tf.control_dependencies([written]):
            tf.raw_ops.AssignAddVariableOp(resource=ring.counter.handle, value=tf.constant(1, tf.int64))


def _local_index(rank: int) -> int:
    """The replica's position among this process's replicas (TF numbers a worker's replicas contiguously)."""
    strategy = tf.distribute.get_strategy()
    local = len(getattr(strategy.extended, "worker_devices", ()) or ()) or 1
    return rank % local
