"""Overhead of Ringscope's TensorFlow custom-loop instrumentation: step time with the agent vs without.

Both loops run in one child process (MirroredStrategy, 2 logical CPU devices, the reference MLP), interleaved in
blocks so that machine load hits both alike:

* baseline: a plain custom loop, ``optimizer.apply_gradients`` inside ``strategy.run`` (Keras all-reduces), the
  loss fetched to the host every step as a training loop that logs would;
* instrumented: ``TimedStepRunner`` (timestamps, one explicit all-reduce, per-replica results fetched) reporting
  every step through a real agent to a real ZeroMQ PULL socket.

Reported: the median over rounds of (median instrumented step / median baseline step), with its min and max.
Target: <= 1.01. The child is a subprocess because TF's logical devices must be set before any op runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

ROUNDS_QUICK, ROUNDS_FULL = 6, 20
BLOCK_STEPS = 20


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the comparison in a child process and return the benchmark rows."""
    rounds = ROUNDS_QUICK if quick else ROUNDS_FULL
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_tf_overhead", "--child", str(rounds)],
                         capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"TF overhead child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    ratios: list[float] = json.loads(out.stdout.strip().splitlines()[-1])["ratios"]
    base: float = json.loads(out.stdout.strip().splitlines()[-1])["baseline_step_s"]
    note = f"{rounds} rounds x {BLOCK_STEPS} steps each way, interleaved; MirroredStrategy 2 CPU replicas"
    return [
        {"benchmark": "tf_overhead", "metric": "step_ratio_median", "value": statistics.median(ratios),
         "unit": "x", "note": f"target <= 1.01; {note}"},
        {"benchmark": "tf_overhead", "metric": "step_ratio_min", "value": min(ratios), "unit": "x", "note": note},
        {"benchmark": "tf_overhead", "metric": "step_ratio_max", "value": max(ratios), "unit": "x", "note": note},
        {"benchmark": "tf_overhead", "metric": "baseline_step", "value": base * 1e3, "unit": "ms", "note": note},
    ]


def _child(rounds: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf
    import zmq

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
    from agent.tf_distribute import TimedStepRunner, start_agent

    context = zmq.Context()
    sink = context.socket(zmq.PULL)
    sink.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{sink.bind_to_random_port('tcp://127.0.0.1')}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 64), dtype=np.float32)
    y = rng.integers(0, 10, 4096)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64, drop_remainder=True)

    def make() -> tuple[Any, Any]:
        with strategy.scope():
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
            optimizer = keras.optimizers.SGD(0.05)
            optimizer.build(model.trainable_variables)
        return model, optimizer

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    base_model, base_opt = make()

    def base_replica(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, base_model(xb, training=True)), global_batch_size=64)
        base_opt.apply_gradients(zip(tape.gradient(loss, base_model.trainable_variables),
                                     base_model.trainable_variables, strict=True))
        return loss

    @tf.function
    def base_step(batch: Any) -> Any:
        return strategy.reduce("SUM", strategy.run(base_replica, args=batch), axis=None)

    model, optimizer = make()
    telemetry = start_agent(strategy, endpoint=endpoint, run_id="bench-tf", sample_devices=False)
    runner = TimedStepRunner(strategy, model, optimizer, loss_fn, global_batch_size=64, telemetry=telemetry)
    base_iter = iter(strategy.experimental_distribute_dataset(data))
    inst_iter = iter(strategy.experimental_distribute_dataset(data))

    def base_block() -> float:
        times = []
        for _ in range(BLOCK_STEPS):
            started = time.perf_counter()
            base_step(next(base_iter)).numpy()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def inst_block() -> float:
        return statistics.median(runner.run_step(inst_iter).step_s for _ in range(BLOCK_STEPS))

    base_block(), inst_block()  # trace both and warm up
    ratios, bases = [], []
    for index in range(rounds):
        # Alternate which goes first so that a trend in machine load does not favour one side.
        if index % 2:
            base, inst = base_block(), inst_block()
        else:
            inst, base = inst_block(), base_block()
        ratios.append(inst / base)
        bases.append(base)
        while sink.poll(0):
            sink.recv()
    telemetry.close()
    sink.close(linger=0)
    context.term()
    print(json.dumps({"ratios": ratios, "baseline_step_s": statistics.median(bases)}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(int(sys.argv[2]))
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)
