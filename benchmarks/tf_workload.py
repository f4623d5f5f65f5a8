"""What the TensorFlow benchmarks share (``bench_tf_overhead``, ``bench_tf_zero_code``, ``gpu_check_tf``).

Their child process (started and read back by the parent, which never loads TensorFlow), 2 logical CPU replicas
under MirroredStrategy, a ROUTER sink that counts what the agent sends, one workload of ``overhead.WORKLOADS`` as
data, pipeline, loss and seeded models, the custom loop's replica step (TensorFlow's tutorial loop), and the timing
of a block of steps. TensorFlow, Keras and ZeroMQ are imported inside the functions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# ---- Parent and child ----------------------------------------------------------------------------------------------


def run_child(module: str, quick: bool, what: str) -> dict[str, Any]:
    """Run ``python -m module --child quick|full`` from the repository root; its last JSON line of output."""
    out = subprocess.run([sys.executable, "-m", module, "--child", "quick" if quick else "full"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{what} child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    payload: dict[str, Any] = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    return payload


def main(run: Callable[..., list[dict[str, Any]]], child: Callable[[bool], None]) -> None:
    """A benchmark module run as a script: the child (``--child quick|full``), else its rows printed."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2] == "quick")
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)


# ---- In the child --------------------------------------------------------------------------------------------------


def cpu_mirrored_strategy(replicas: int = 2) -> Any:
    """MirroredStrategy over ``replicas`` logical devices split from the CPU (before TensorFlow starts)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])


class MessageSink:
    """A ROUTER socket on a random localhost port that takes and counts what the agent sends (``drain``)."""

    def __init__(self) -> None:
        import zmq

        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self._socket.bind_to_random_port('tcp://127.0.0.1')}"
        self.received = 0

    def drain(self) -> None:
        """Take every message waiting (without blocking)."""
        while self._socket.poll(0):
            self._socket.recv_multipart()
            self.received += 1

    def close(self) -> None:
        """Take what the agent sent last (it flushes within 0.5 s), then close."""
        time.sleep(0.5)
        self.drain()
        self._socket.close(linger=0)
        self._context.term()


@dataclass(frozen=True)
class Workload:
    """One workload of ``overhead.WORKLOADS`` on a strategy: its data pipeline, loss and how to build its model."""

    strategy: Any
    dataset: str
    width: int
    depth: int
    batch: int
    rounds: int
    block: int
    global_batch: int
    data: Any
    pipeline: Any
    loss_fn: Any

    @property
    def description(self) -> str:
        """For the benchmark's note, e.g. ``digits width 64 depth 2 batch 32/replica``."""
        return f"{self.dataset} width {self.width} depth {self.depth} batch {self.batch}/replica"

    def build(self) -> tuple[Any, Any]:
        """The reference trainer's model and an SGD optimizer, seeded (every variant starts the same)."""
        import keras

        from ringscope.trainers.tf_trainer import build_model

        keras.utils.set_random_seed(0)
        model_args = argparse.Namespace(slow_rank=None, model_width=self.width, model_depth=self.depth)
        with self.strategy.scope():
            model = build_model(model_args, self.data.num_features, self.data.num_classes)
            optimizer = keras.optimizers.SGD(0.05)
            optimizer.build(model.trainable_variables)
        return model, optimizer

    def iterator(self) -> Any:
        """A new distributed iterator over the pipeline."""
        return iter(self.strategy.experimental_distribute_dataset(self.pipeline))


def workload(strategy: Any, spec: tuple[str, int, int, int, tuple[int, int], int], quick: bool) -> Workload:
    """``spec`` (a ``WORKLOADS`` value) on ``strategy``: TF start-up and tracing take ~20 s of the quick budget, so
    a quick run has a third of the rounds DDP runs."""
    import keras
    import tensorflow as tf

    from ringscope.trainers import common

    dataset, width, depth, batch, rounds_by_mode, block = spec
    global_batch = batch * strategy.num_replicas_in_sync
    data = common.load_dataset(dataset, model_width=width)
    pipeline = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).repeat().batch(
        global_batch, drop_remainder=True)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    rounds = rounds_by_mode[0] // 3 if quick else rounds_by_mode[1]
    return Workload(strategy, dataset, width, depth, batch, rounds, block, global_batch, data, pipeline, loss_fn)


def replica_step(model: Any, optimizer: Any, loss_fn: Any, global_batch: int) -> Callable[[Any, Any], Any]:
    """The replica step of TensorFlow's custom-loop tutorial: loss, gradients, ``apply_gradients``; the loss back."""
    import tensorflow as tf

    def replica(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return replica


def refuse_timing_failure(where: str, exc: BaseException) -> None:
    """``replica_timing.timed_replica_fn``'s ``on_error`` for a benchmark: a timing failure fails the benchmark."""
    raise RuntimeError(f"replica timing failed in {where}") from exc


def block_runner(steps: dict[str, Callable[[], object]], block: int) -> Callable[[str], list[float]]:
    """``overhead.interleave``'s ``run_block``: ``block`` steps of a variant, each timed."""

    def run_block(variant: str) -> list[float]:
        step, times = steps[variant], []
        for _ in range(block):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        return times

    return run_block
