"""ringscope.agent.tf_distribute in-process: TF_CONFIG identity, the exact single-reduction update, checkpoint events.

TensorFlow runs in this pytest process with two logical CPU devices (configured once, before any op, by the
module fixture). Telemetry goes through a real ZeroMQ ROUTER socket on a random port.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zmq

from ringscope import agent
from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, Record, Step
from ringscope.agent.tf_distribute import replica_ranks, worker_identity

# ---- TF_CONFIG identity (no TensorFlow) --------------------------------------------------------------------------


def _tf_config(task_type: str, index: int, workers: int, chiefs: int = 0) -> str:
    cluster: dict[str, list[str]] = {"worker": [f"localhost:{2000 + i}" for i in range(workers)]}
    if chiefs:
        cluster["chief"] = ["localhost:1999"]
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_identity_without_tf_config_is_a_single_worker() -> None:
    ident = worker_identity("")
    assert (ident.worker_rank, ident.num_workers, ident.is_chief) == (0, 1, True)


def test_identity_numbers_chief_first_then_workers() -> None:
    chief = worker_identity(_tf_config("chief", 0, workers=2, chiefs=1))
    second = worker_identity(_tf_config("worker", 1, workers=2, chiefs=1))
    assert (chief.worker_rank, chief.is_chief, chief.num_workers) == (0, True, 3)
    assert (second.worker_rank, second.is_chief) == (2, False)
    assert worker_identity(_tf_config("worker", 0, workers=2)).is_chief  # no chief: worker 0 is chief


def test_identity_refuses_unusable_tf_config_naming_it() -> None:
    with pytest.raises(ValueError, match="not a valid cluster description"):
        worker_identity("{not json")
    with pytest.raises(ValueError, match="task index 5 is outside"):
        worker_identity(_tf_config("worker", 5, workers=2))


def test_replica_ranks_are_worker_major() -> None:
    assert replica_ranks(1, 2) == [2, 3]
    with pytest.raises(ValueError, match="local_replicas=0"):
        replica_ranks(0, 0)


def test_importing_the_package_does_not_import_tensorflow() -> None:
    import subprocess

    code = "import agent, ringscope.agent.tf_distribute, sys; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


# ---- TensorFlow in-process ---------------------------------------------------------------------------------------


class Receiver:
    """A real ROUTER socket drained on a thread into decoded records."""

    def __init__(self) -> None:
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self._socket.bind_to_random_port('tcp://127.0.0.1')}"
        self.records: list[Record] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            if self._socket.poll(50):
                self.records.extend(wire.decode(self._socket.recv_multipart()[-1]).records)

    def events(self, kind: str) -> list[Event]:
        return [r for r in self.records if isinstance(r, Event) and r.event == kind]

    def wait_for(self, predicate: Any, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not predicate():
            time.sleep(0.05)
        return bool(predicate())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._socket.close(linger=0)
        self._context.term()


@pytest.fixture(scope="module")
def tf_two_cpus() -> Any:
    """TensorFlow with two logical CPU devices and a MirroredStrategy over them."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    except RuntimeError as exc:
        pytest.fail(f"TensorFlow was initialized by an earlier test in this process; run this module alone ({exc})")
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) == 2, devices
    return tf, tf.distribute.MirroredStrategy(devices)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    yield rec
    rec.close()


# Exactly representable in float32: x, y small integers, lr a power of two, global batch 4.
X = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], np.float32)
Y = np.array([[1], [2], [3], [4]], np.float32)
LR = 0.125


def _squared_error(labels: Any, predictions: Any) -> Any:
    import tensorflow as tf

    return tf.reduce_sum(tf.square(predictions - labels), axis=-1)


def test_one_update_equals_hand_computed_sgd_with_a_single_all_reduce(tf_two_cpus: Any, receiver: Receiver) -> None:
    tf, strategy = tf_two_cpus
    import keras

    from ringscope.agent.tf_distribute import TimedStepRunner, start_agent

    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
        optimizer = keras.optimizers.SGD(LR)
        optimizer.build(model.trainable_variables)
    telemetry = start_agent(strategy, endpoint=receiver.endpoint, run_id="exact-update", sample_devices=False)
    assert telemetry.identity.ranks == [0, 1] and telemetry.identity.strategy == "mirrored"
    runner = TimedStepRunner(strategy, model, optimizer, _squared_error, global_batch_size=4, telemetry=telemetry)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((X, Y)).batch(4))
    result = runner.run_step(iter(data))
    telemetry.close()

    # loss = sum((x.w - y)^2) / 4 over the global batch  ->  grad = (2 / 4) X^T (X w - y), w = 0
    grad = 2.0 / 4.0 * X.T @ (X @ np.zeros((3, 1), np.float32) - Y)
    expected = (0.0 - LR * grad).astype(np.float32)
    for replica_value in strategy.experimental_local_results(model.trainable_variables[0].value):
        np.testing.assert_array_equal(replica_value.numpy(), expected)
    # A second all-reduce (Keras's own) would have doubled the step; make sure that is what we ruled out.
    assert not np.array_equal(expected, 2 * expected)
    assert int(optimizer.iterations.numpy()) == 1

    assert [r.rank for r in result.replicas] == [0, 1]
    assert [r.samples for r in result.replicas] == [2, 2]
    for replica in result.replicas:
        assert replica.compute_s > 0 and replica.comm_s >= 0 and replica.comm_exposed_s == replica.comm_s
        assert replica.compute_s + replica.comm_exposed_s <= result.step_s
    assert result.first_batch and 0 <= result.data_wait_s <= result.step_s

    assert receiver.wait_for(lambda: len([r for r in receiver.records if isinstance(r, Step)]) >= 2)
    steps = sorted((r for r in receiver.records if isinstance(r, Step)), key=lambda s: s.rank)
    assert [(s.rank, s.step) for s in steps] == [(0, 0), (1, 0)]
    assert steps[0].comm_s == pytest.approx(result.replicas[0].comm_s)


def test_normal_apply_gradients_still_reduces_outside_the_runner(tf_two_cpus: Any) -> None:
    """The wrapper only skips the reduction while the runner applies; other callers keep Keras's behaviour."""
    tf, strategy = tf_two_cpus
    import keras

    from ringscope.agent.tf_distribute.loop import install_prereduced_apply

    with strategy.scope():
        var = keras.Variable(np.zeros(1, np.float32))
        optimizer = keras.optimizers.SGD(1.0)
        optimizer.build([var])
    install_prereduced_apply(optimizer)

    @tf.function
    def step() -> None:
        strategy.run(lambda: optimizer.apply_gradients([(tf.ones(1), var)]))

    step()
    # Two replicas each contribute a gradient of 1: Keras sums them (2), so one SGD step moves by -2.
    for value in strategy.experimental_local_results(var.value):
        np.testing.assert_array_equal(value.numpy(), [-2.0])


def test_checkpoint_save_and_restore_are_reported(tf_two_cpus: Any, receiver: Receiver, tmp_path: Any) -> None:
    tf, _ = tf_two_cpus
    from ringscope.agent.tf_distribute import restore_latest, save_checkpoint

    value = tf.Variable(np.arange(1000, dtype=np.float32))
    checkpoint = tf.train.Checkpoint(value=value)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2)
    telemetry = agent.start(framework="tensorflow", strategy="mirrored", endpoint=receiver.endpoint,
                            run_id="ckpt", sample_devices=False)
    assert restore_latest(checkpoint, manager, telemetry) is None  # nothing saved yet: nothing reported
    prefix = save_checkpoint(manager, telemetry, step=7, rank=0)
    value.assign(tf.zeros(1000))
    assert restore_latest(checkpoint, manager, telemetry, rank=0) == 7
    telemetry.close()
    np.testing.assert_array_equal(value.numpy(), np.arange(1000, dtype=np.float32))

    assert receiver.wait_for(lambda: receiver.events(EventKind.CHECKPOINT_RESTORED))
    saved, restored = receiver.events(EventKind.CHECKPOINT_SAVED), receiver.events(EventKind.CHECKPOINT_RESTORED)
    assert len(saved) == 1 and len(restored) == 1
    assert saved[0].step == 7 and saved[0].text == prefix and saved[0].duration_s is not None
    assert saved[0].bytes is not None and saved[0].bytes >= 4000  # 1000 float32 values are on disk
    assert restored[0].step == 7 and restored[0].bytes == saved[0].bytes


def test_runner_refuses_a_non_keras3_optimizer(tf_two_cpus: Any) -> None:
    _, strategy = tf_two_cpus
    from ringscope.agent.tf_distribute import TimedStepRunner

    with pytest.raises(TypeError, match="needs a Keras 3 optimizer"):
        TimedStepRunner(strategy, object(), object(), _squared_error, global_batch_size=4)


def test_replica_timestamps_are_not_chained_by_automatic_control_dependencies(tf_two_cpus: Any) -> None:
    # tf.function orders stateful ops in trace order; MirroredStrategy traces replicas one after the other, so
    # chained timestamps made replica 1's forward wait for replica 0's backward (~8 % slower, and wrong compute /
    # comm splits). Only t2 -> t3 of the same replica may be ordered; any other timestamp-to-timestamp edge is the
    # chain coming back.
    tf, strategy = tf_two_cpus
    import keras

    from ringscope.agent.tf_distribute import TimedStepRunner

    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(LR)
    runner = TimedStepRunner(strategy, model, optimizer, _squared_error, global_batch_size=4)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((X, Y)).batch(4).repeat())
    iterator = iter(data)
    runner.run_step(iterator)
    graph = runner._step_fn.get_concrete_function(next(iterator)).graph
    stamps = [op for op in graph.get_operations() if op.type == "Timestamp"]
    assert len(stamps) == 4 * strategy.num_replicas_in_sync, [op.name for op in stamps]
    chained = [(dep.name, op.name) for op in stamps for dep in op.control_inputs if dep.type == "Timestamp"]
    assert len(chained) <= strategy.num_replicas_in_sync, chained
