"""A TensorFlow training as a user writes it (no Ringscope import), with a known straggler and a known data delay.

Replica 1's forward pass sleeps ``--slow-ms`` (60) longer than replica 0's, and every batch takes ``--batch-ms`` (40)
to produce. Modes:

- ``fit``: Keras ``model.fit`` under MirroredStrategy with 2 logical CPU replicas in this process;
- ``loop``: a custom loop under MirroredStrategy: the batch fetched with ``next(iterator)``, then a ``tf.function``
  that calls ``strategy.run``; the script times ``next()`` itself and prints ``NEXT_MS <median>``;
- ``loop-multi``: a custom loop whose ``tf.function`` runs ``--steps-per-call`` steps (``next(iterator)`` and
  ``strategy.run`` in a ``tf.range`` loop), as ``steps_per_execution`` does for ``fit``;
- ``loop-worker``: the same loop as one worker of a 2-process MultiWorkerMirroredStrategy (``TF_CONFIG`` set by the
  caller; one CPU replica per worker, replica 1 is worker 1's).

(``fit`` under MultiWorkerMirroredStrategy fails with Keras 3.15 + TF 2.21 without Ringscope, on arrays and on
datasets alike: "Attempt to convert a value (PerReplica...)"; shared/ENVIRONMENT.md. ``fit`` with
``steps_per_execution`` > 1 under MirroredStrategy fails there too, even for one Dense layer: "You must feed a value
for placeholder tensor 'while/cond/Placeholder'", and then hangs at exit; hence ``loop-multi``.)

Prints ``STEP_MS <median step time over the steady steps>`` measured with its own stopwatch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

FEATURES = 8
CLASSES = 3
PER_REPLICA = 16


class SlowOnReplica(tf.keras.layers.Layer):
    """Sleeps ``delay_s`` in the forward pass of one replica (the straggler), identity on the others."""

    def __init__(self, replica: int, delay_s: float, **kwargs):
        super().__init__(**kwargs)
        self.replica, self.delay_s = replica, delay_s

    def call(self, x):
        context = tf.distribute.get_replica_context()
        here = tf.get_static_value(context.replica_id_in_sync_group) if context is not None else 0
        if here != self.replica:
            return x
        slept = tf.numpy_function(lambda a: (time.sleep(self.delay_s), a)[1], [x], tf.float32, stateful=True)
        return tf.ensure_shape(slept, x.shape)


def slow_batches(steps: int, global_batch: int, delay_s: float) -> tf.data.Dataset:
    """``steps`` batches of ``global_batch`` rows, each taking ``delay_s`` to produce (a slow input pipeline)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * global_batch, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=(steps * global_batch,))

    def slow(a):
        time.sleep(delay_s)
        return a

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    ds = ds.map(lambda a, b: (tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32, stateful=True),
                                              (global_batch, FEATURES)), b))
    return ds.repeat()


def build(strategy: tf.distribute.Strategy, slow_ms: float) -> tf.keras.Model:
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), SlowOnReplica(1, slow_ms / 1000),
                                     tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(CLASSES)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class Stopwatch(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps_ms: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps_ms.append((time.perf_counter() - self.started) * 1e3)


def run_fit(strategy: tf.distribute.Strategy, args: argparse.Namespace) -> list[float]:
    model = build(strategy, args.slow_ms)
    global_batch = PER_REPLICA * strategy.num_replicas_in_sync
    data = slow_batches(args.steps, global_batch, args.batch_ms / 1000)
    stopwatch = Stopwatch()
    model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[stopwatch])
    return stopwatch.steps_ms


def run_loop(strategy: tf.distribute.Strategy, args: argparse.Namespace) -> list[float]:
    model = build(strategy, args.slow_ms)
    with strategy.scope():
        optimizer = tf.keras.optimizers.SGD(0.05)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    global_batch = PER_REPLICA * strategy.num_replicas_in_sync
    data = slow_batches(args.steps, global_batch, args.batch_ms / 1000)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    iterator = iter(strategy.experimental_distribute_dataset(data.with_options(options)))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    @tf.function
    def train_steps(iterator):  # several steps per call: the loop runs in the graph
        total = tf.constant(0.0)
        for _ in tf.range(args.steps_per_call):
            x, y = next(iterator)
            total += strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)
        return total

    steps_ms, next_ms = [], []
    if args.mode == "loop-multi":
        for _ in range(args.steps // args.steps_per_call):
            started = time.perf_counter()
            train_steps(iterator).numpy()
            steps_ms.append((time.perf_counter() - started) * 1e3)
        return steps_ms
    for _ in range(args.steps):
        started = time.perf_counter()
        x, y = next(iterator)
        fetched = time.perf_counter()
        train_step(x, y).numpy()
        steps_ms.append((time.perf_counter() - started) * 1e3)
        next_ms.append((fetched - started) * 1e3)
    print(f"NEXT_MS {statistics.median(next_ms[3:]):.2f}", flush=True)
    return steps_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["fit", "loop", "loop-multi", "loop-worker"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--slow-ms", type=float, default=60.0)
    parser.add_argument("--batch-ms", type=float, default=40.0)
    parser.add_argument("--steps-per-call", type=int, default=4)
    args = parser.parse_args()
    if args.mode == "loop-worker":
        strategy: tf.distribute.Strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    steps_ms = run_fit(strategy, args) if args.mode == "fit" else run_loop(strategy, args)
    print(f"STEP_MS {statistics.median(steps_ms[3:]):.2f}", flush=True)
    print("RESULT " + json.dumps({"mode": args.mode, "steps": len(steps_ms)}), flush=True)


if __name__ == "__main__":
    main()
