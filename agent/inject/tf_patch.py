"""Zero-code TensorFlow: the patches the bootstrap installs once ``tensorflow`` and ``keras`` finished importing.

``model.fit`` (Keras 3) under a MirroredStrategy or MultiWorkerMirroredStrategy (the model's
``distribute_strategy``) gets ``RingscopeCallback`` appended to its callbacks, with one agent per process
(``start_agent``): step time per ``steps_per_execution``, samples when the global batch is known (array inputs:
``batch_size``, default 32; a ``tf.data.Dataset`` whose batch dimension is static, e.g. ``drop_remainder=True``),
Keras's running loss, epochs. A script that passes its own ``RingscopeCallback`` is left alone.

Custom loops: the ``tf.function`` whose trace calls ``strategy.run`` (the outermost one being called) is the step
function; each later eager call of it is one step: ``step_s`` from the batch request (or the call) to the call's
return; samples per replica from the batch. An eager ``strategy.run(...)`` outside any ``tf.function`` is one
step itself.

Per replica, in both: the function handed to ``strategy.run`` while a ``tf.function`` is traced (Keras's
``train_step`` included) is wrapped by ``ringscope.agent.tf_distribute.replica_timing``, which stamps it in the
graph: data wait inside the graph, compute, all-reduce time and AllReduce stall, read on the agent's thread. A
custom loop that fetches its batch eagerly with ``next(iterator)`` on a distributed iterator before the call adds
that host wait to ``data_wait_s``. Not timed, with one stderr line: strategies other than the two data-parallel
ones, XLA-compiled steps, op determinism (``replica_timing.untimed_reason``). ``evaluate``/``predict`` and eager
steps are not stamped. Calls made by Keras's other entry points (``evaluate``, ``predict``, ``*_on_batch``) and by
``ringscope.agent.tf_distribute`` are not counted as steps, so a script that times its loop with
``TimedStepRunner`` is measured once.

Patched: ``keras.Model.fit`` / ``evaluate`` / ``predict`` / ``*_on_batch``, ``tf.distribute.Strategy.run``,
``tf.function``'s ``Function.__call__`` (one thread-local list push per call) and the distributed iterator's
``__next__``. Each calls the original unchanged when the injection is off and turns it off on an internal error.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import tensorflow as tf
from tensorflow.python.distribute import input_lib

from ringscope.agent.inject import guard
from ringscope.agent.runtime import Agent
from ringscope.agent.tf_distribute import replica_timing
from ringscope.agent.tf_distribute.keras_callback import RingscopeCallback
from ringscope.agent.tf_distribute.runtime import start_agent

_TLS = threading.local()
_STEP_FUNCTION = "_ringscope_step_strategy"  # attribute of a marked tf.function: the strategy it runs
_KERAS_ENTRY_POINTS = ("evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")


# ---- Public API --------------------------------------------------------------------------------------------------

def install() -> None:
    """Patch Keras ``fit`` and the custom-loop entry points (once per process)."""
    if getattr(keras.Model, "_ringscope_patched", False):
        return
    _patch_fit()
    for name in _KERAS_ENTRY_POINTS:
        _patch_keras_entry(name)
    _patch_strategy_run()
    replica_timing.install_all_reduce_hook()
    _patch_function_call()
    _patch_iterator_next()
    keras.Model._ringscope_patched = True


class ProcessTelemetry:
    """The process's one agent for TF: the script's own (seen in its ``RingscopeCallback``) or one started at the
    first instrumented fit or loop step and closed at exit."""

    def __init__(self) -> None:
        self._agent: Agent | None = None
        self._lock = threading.Lock()

    def agent_for(self, strategy: Any) -> Agent:
        """The agent describing ``strategy``'s replicas in this process."""
        with self._lock:
            if self._agent is None:
                self._agent = start_agent(strategy)
                atexit.register(self._close, self._agent)
            return self._agent

    def adopt(self, agent: Agent | None) -> None:
        """Report through the script's own agent (it closes it) rather than start a second one."""
        with self._lock:
            if self._agent is None and agent is not None:
                self._agent = agent

    @staticmethod
    def _close(agent: Agent) -> None:
        try:
            agent.close()
        except Exception as exc:
            guard.failed("closing", exc)


class LoopTiming:
    """Host timing of a custom loop: batches fetched eagerly, then one step per call of the step function."""

    def __init__(self, telemetry: ProcessTelemetry) -> None:
        self._telemetry = telemetry
        self._step = 0
        self._batch_start_s: float | None = None
        self._waited_s = 0.0
        self._samples: list[int] | None = None
        self._first = False
        self._last_iterator: int | None = None
        self.traced_now = False

    def batch_ready(self, iterator: Any, started_wall_s: float, waited_s: float, batch: Any) -> None:
        """The loop fetched a batch eagerly, waiting ``waited_s``; it belongs to the next step."""
        if self._batch_start_s is None:
            self._batch_start_s = started_wall_s
        self._waited_s += waited_s
        self._samples = _replica_samples(batch)
        if id(iterator) != self._last_iterator:
            self._first = True  # the first batch of an iterator includes the pipeline's start-up
            self._last_iterator = id(iterator)

    def continue_after(self, steps_done: int) -> None:
        """Number the loop's steps after the ``steps_done`` steps a ``fit`` reported."""
        self._step = max(self._step, steps_done)

    def step_ended(self, strategy: Any, started_wall_s: float) -> None:
        """A step function call (or an eager ``strategy.run``) that began at ``started_wall_s`` returned now."""
        end_s = time.time()
        agent = self._telemetry.agent_for(strategy)
        fetched = self._batch_start_s is not None
        start_s = self._batch_start_s if self._batch_start_s is not None else started_wall_s
        ranks = agent.identity.ranks
        samples = self._samples if self._samples is not None and len(self._samples) == len(ranks) else None
        first = self._first or self.traced_now
        host_wait = self._waited_s if fetched else None
        step = self._step

        def emit(replicas: dict[int, replica_timing.ReplicaFigures]) -> None:
            for index, rank in enumerate(ranks):
                data_wait, compute, comm = replica_timing.phases(replicas.get(rank), host_wait)
                agent.step(rank, step, start_s, end_s, data_wait_s=data_wait, compute_s=compute, comm_s=comm,
                           comm_exposed_s=comm, samples=None if samples is None else samples[index], first_batch=first)

        replica_timing.COLLECTOR.attach(agent)
        replica_timing.COLLECTOR.submit(start_s, end_s, emit)
        self._step += 1
        self._batch_start_s, self._waited_s, self._samples, self._first, self.traced_now = None, 0.0, None, False, False


_TELEMETRY = ProcessTelemetry()
_LOOP = LoopTiming(_TELEMETRY)


# ---- Keras ---------------------------------------------------------------------------------------------------------

def _patch_fit() -> None:
    original = keras.Model.fit
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        callback = None
        if guard.active():
            try:
                args, kwargs, callback = _with_callback(self, signature, args, kwargs)
            except Exception as exc:
                guard.failed("model.fit", exc)
        with _inside_keras("fit"):
            history = original(self, *args, **kwargs)
        if callback is not None:
            _LOOP.continue_after(callback._step)
        return history

    keras.Model.fit = fit


def _patch_keras_entry(name: str) -> None:
    original = getattr(keras.Model, name, None)
    if original is None:
        return

    @functools.wraps(original)
    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _inside_keras(name):
            return original(self, *args, **kwargs)

    setattr(keras.Model, name, entry)


def _with_callback(
    model: Any, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], RingscopeCallback | None]:
    """``fit``'s arguments with ``RingscopeCallback`` appended, and the callback whose step count a later custom
    loop continues (ours, or the script's own, which is then left alone); unchanged and None when fit is not
    data-parallel."""
    strategy = model.distribute_strategy
    if not _data_parallel(strategy):
        _not_data_parallel(strategy)
        return args, kwargs, None
    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:  # arguments fit refuses: let fit say so, without us
        return args, kwargs, None
    callbacks = bound.arguments.get("callbacks")
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return args, kwargs, None  # a prepared CallbackList is the script's to own: not touched
    existing = list(callbacks or [])
    own = [callback for callback in existing if isinstance(callback, RingscopeCallback)]
    if own:  # the script instruments itself: nothing added; a custom loop later reports through its agent
        _TELEMETRY.adopt(own[0]._telemetry)
        return args, kwargs, own[0]
    guard.fault("attach")
    callback = RingscopeCallback(_TELEMETRY.agent_for(strategy), global_batch_size=_global_batch(bound))
    bound.arguments["callbacks"] = [*existing, callback]
    return bound.args[1:], bound.kwargs, callback


def _global_batch(bound: inspect.BoundArguments) -> int | None:
    """Samples per optimizer step over all replicas, when ``fit``'s input says (see the module docstring)."""
    x = bound.arguments.get("x")
    if isinstance(x, tf.data.Dataset):
        leaves = tf.nest.flatten(x.element_spec)
        shape = getattr(leaves[0], "shape", None) if leaves else None
        if shape is None or shape.rank is None or shape.rank == 0 or shape[0] is None:
            return None
        return int(shape[0])
    if hasattr(x, "shape") or isinstance(x, (list, tuple, dict)):  # arrays: Keras batches them itself
        return int(bound.arguments.get("batch_size") or 32)
    return None  # generators, PyDataset, distributed datasets: unknown


@contextmanager
def _inside_keras(entry: str) -> Iterator[None]:
    entries = _keras_entries()
    entries.append(entry)
    try:
        yield
    finally:
        entries.pop()


def _keras_entries() -> list[str]:
    """The Keras entry points (fit, evaluate...) this thread is inside, innermost last."""
    return replica_timing.thread_list(_TLS, "keras_entries")


# ---- Custom loops ----------------------------------------------------------------------------------------------------

def _patch_strategy_run() -> None:
    original = tf.distribute.Strategy.run

    @functools.wraps(original)
    def run(self: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        if not guard.active() or _from_agent(fn):
            return original(self, fn, args=args, kwargs=kwargs, options=options)
        fn = _timed_replicas(self, fn)
        if _keras_depth():
            return original(self, fn, args=args, kwargs=kwargs, options=options)
        try:
            eager_step = _run_called(self)
        except Exception as exc:
            guard.failed("strategy.run", exc)
            eager_step = False
        if not eager_step:
            return original(self, fn, args=args, kwargs=kwargs, options=options)
        started = time.time()
        result = original(self, fn, args=args, kwargs=kwargs, options=options)
        _step_ended(self, started)
        return result

    tf.distribute.Strategy.run = run


def _timed_replicas(strategy: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with in-graph replica timing (``replica_timing``) when this is a data-parallel step being traced."""
    try:
        entries = _keras_entries()
        if not _data_parallel(strategy) or tf.executing_eagerly() or (entries and entries[-1] != "fit"):
            return fn  # evaluate / predict (also fit's validation) are not training steps: not timed
        reason = replica_timing.untimed_reason()
        if reason is not None:
            guard.unmeasured("data wait, compute and AllReduce stall per replica", reason)
            return fn
        return replica_timing.timed_replica_fn(fn, _timing_failed)
    except Exception as exc:
        _timing_failed("strategy.run", exc)
        return fn


def _timing_failed(where: str, exc: BaseException) -> None:
    guard.unmeasured("data wait, compute and AllReduce stall per replica", f"{where}: {type(exc).__name__}: {exc}")


def _run_called(strategy: Any) -> bool:
    """Mark the tf.function being traced as the step function; True when this run is an eager step itself."""
    if not _data_parallel(strategy):
        _not_data_parallel(strategy)
        return False
    stack = _call_stack()
    if stack:
        function = stack[0]
        if getattr(function, _STEP_FUNCTION, None) is None:
            setattr(function, _STEP_FUNCTION, strategy)
        _LOOP.traced_now = True
        return False
    return bool(tf.executing_eagerly())


def _patch_function_call() -> None:
    function_class = type(tf.function(lambda: None))
    original = function_class.__call__

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not guard.active():
            return original(self, *args, **kwargs)
        stack = _call_stack()
        stack.append(self)
        started = time.time()
        try:
            result = original(self, *args, **kwargs)
        finally:
            stack.pop()
        if not stack:
            strategy = getattr(self, _STEP_FUNCTION, None)
            if strategy is not None and not _keras_depth():
                _step_ended(strategy, started)
        return result

    function_class.__call__ = call


def _patch_iterator_next() -> None:
    iterator_class = input_lib.DistributedIteratorBase
    original = iterator_class.__next__

    @functools.wraps(original)
    def next_batch(self: Any) -> Any:
        if not guard.active() or _keras_depth() or _call_stack():
            return original(self)
        started_wall, started = time.time(), time.perf_counter()
        batch = original(self)  # StopIteration and the pipeline's own errors pass through untouched
        waited = time.perf_counter() - started
        try:
            if tf.executing_eagerly():
                _LOOP.batch_ready(self, started_wall, waited, batch)
        except Exception as exc:
            guard.failed("distributed iterator", exc)
        return batch

    iterator_class.__next__ = next_batch


def _step_ended(strategy: Any, started_wall_s: float) -> None:
    try:
        guard.fault("attach")
        _LOOP.step_ended(strategy, started_wall_s)
    except Exception as exc:
        guard.failed("custom-loop step", exc)


# ---- Helpers ---------------------------------------------------------------------------------------------------------

def _keras_depth() -> int:
    """How many Keras entry points (fit, evaluate...) this thread is inside."""
    return len(_keras_entries())


def _call_stack() -> list[Any]:
    """The tf.functions being called on this thread, outermost first."""
    return replica_timing.thread_list(_TLS, "functions")


def _data_parallel(strategy: Any) -> bool:
    return isinstance(strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy))


def _from_agent(fn: Any) -> bool:
    return str(getattr(fn, "__module__", "") or "").startswith("ringscope.agent.")


def _not_data_parallel(strategy: Any) -> None:
    """Say once that a training under another strategy (or none) is not measured."""
    name = type(strategy).__name__
    guard.unmeasured("this TensorFlow training", f"its strategy is {name}; Ringscope measures MirroredStrategy and "
                                                 "MultiWorkerMirroredStrategy")


def _replica_samples(batch: Any) -> list[int] | None:
    """Samples of each local replica: the first dimension of the batch's first component, per replica."""
    leaves = tf.nest.flatten(batch, expand_composites=False)
    if not leaves:
        return None
    values = getattr(leaves[0], "values", None)
    parts = values if isinstance(values, tuple) else (leaves[0],)
    samples = []
    for part in parts:
        shape = getattr(part, "shape", None)
        if shape is None or len(shape) == 0 or shape[0] is None:
            return None
        samples.append(int(shape[0]))
    return samples
