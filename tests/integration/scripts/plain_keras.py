"""A plain Keras training under MirroredStrategy (2 logical CPU devices) with no Ringscope import (unless
--manual-callback): ``model.fit`` on arrays, then a custom loop whose ``tf.function`` calls ``strategy.run``.

The custom loop fetches each batch eagerly (``next(iterator)``) from a pipeline that sleeps ``--data-delay-ms`` per
batch, so that delay is the known data wait. ``--manual-callback`` passes the script's own ``RingscopeCallback`` to
``fit`` (double-instrumentation check). Prints ``RESULT <checksum of the final weights>``; ``--exit-code N`` ends
with that code after printing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 16


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit-steps", type=int, default=8)
    parser.add_argument("--loop-steps", type=int, default=8)
    parser.add_argument("--data-delay-ms", type=float, default=0.0)
    parser.add_argument("--manual-callback", action="store_true")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    tf.keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.fit_steps * GLOBAL_BATCH, 8)).astype("float32")
    y = rng.integers(0, 3, size=(args.fit_steps * GLOBAL_BATCH,))
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(3)])
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss=loss)
    callbacks = []
    telemetry = None
    if args.manual_callback:
        from ringscope.agent.tf_distribute import RingscopeCallback, start_agent

        telemetry = start_agent(strategy)
        callbacks.append(RingscopeCallback(telemetry, global_batch_size=GLOBAL_BATCH))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)

    if args.loop_steps:
        custom_loop(strategy, model, x, y, args.loop_steps, args.data_delay_ms / 1000)
    if telemetry is not None:
        telemetry.close()
    checksum = sum(float(np.sum(w.astype("float64"))) for w in model.get_weights())
    print(f"RESULT {checksum:.6f}", flush=True)
    return args.exit_code


def custom_loop(strategy: tf.distribute.Strategy, model: tf.keras.Model, x: np.ndarray, y: np.ndarray,
                steps: int, delay_s: float) -> None:
    def slow(index: tf.Tensor) -> tf.Tensor:
        time.sleep(delay_s)
        return index

    dataset = tf.data.Dataset.range(steps).map(lambda i: tf.py_function(slow, [i], tf.int64))
    dataset = dataset.map(lambda i: (tf.gather(x, tf.range(GLOBAL_BATCH) + tf.cast(i, tf.int32) % 4),
                                     tf.gather(y, tf.range(GLOBAL_BATCH))))
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():
        optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def step_fn(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                              global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(batch: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        return strategy.run(step_fn, args=batch)

    for _ in range(steps):
        train_step(next(iterator))


if __name__ == "__main__":
    sys.exit(main())
