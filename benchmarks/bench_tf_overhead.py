"""Overhead of Ringscope's TensorFlow custom-loop instrumentation: step time with the agent vs without.

One child process (MirroredStrategy, 2 logical CPU devices; TF's logical devices must be set before any op runs,
hence the subprocess) measures two workloads of the reference trainer (``ringscope.trainers.tf_trainer.build_model``'s
MLP and ``ringscope.trainers.common`` data, batch 32 per replica), one after the other:

* ``digits``: the trainer's default (digits data, width 64, depth 2): a ~2-3 ms step, the worst case for a fixed
  per-step cost;
* ``realistic``: ``--dataset synthetic --model-width 1024 --model-depth 4``: a tens-of-ms CPU step.

Each workload holds three identically built models and loops:

* ``baseline``: a plain custom loop as TensorFlow's tutorial writes it: ``optimizer.apply_gradients`` inside
  ``strategy.run`` (Keras all-reduces), the loss summed with ``strategy.reduce`` and fetched every step;
* ``control``: a second, identical baseline loop. control / baseline is an A/A ratio: its spread is the noise
  floor of this machine at this moment;
* ``instrumented``: ``TimedStepRunner`` (timestamps, one explicit all-reduce, per-replica results fetched, timed
  ``next()``) reporting every step through a real agent to a real ZeroMQ ROUTER socket.

They run in blocks of a few steps, the order rotating every round. A step is timed from before ``next()`` to after
its results are on the host. Reported per workload (same figures as ``bench_ddp_overhead``): median over rounds of
the instrumented / baseline ratio with its IQR, the A/A control, the baseline step, the extra time per step, and
the extra process CPU time per step (TF's thread pools included).
Target: ratio <= 1.01.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.overhead import WORKLOADS, interleave, summarize, summary_rows

ROOT = Path(__file__).resolve().parents[1]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the comparison in a child process and return the benchmark rows."""
    mode = "quick" if quick else "full"
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_tf_overhead", "--child", mode],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"TF overhead child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    payload = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    rows: list[dict[str, Any]] = []
    for name, result in payload["workloads"].items():
        rows += summary_rows("tf_overhead", name, result, "MirroredStrategy 2 CPU replicas, vs a plain custom loop")
    rows.append({"benchmark": "tf_overhead", "metric": "messages_received", "value": float(payload["received"]),
                 "unit": "msgs", "note": "telemetry really sent to a ROUTER socket (batched frames)"})
    return rows


def _child(quick: bool) -> None:
    import tensorflow as tf
    import zmq

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
    context = zmq.Context()
    sink = context.socket(zmq.ROUTER)
    sink.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{sink.bind_to_random_port('tcp://127.0.0.1')}"
    received = [0]

    def drain() -> None:
        while sink.poll(0):
            sink.recv_multipart()[-1]
            received[0] += 1

    results = {name: _measure(strategy, spec, quick, endpoint, drain) for name, spec in WORKLOADS.items()}
    time.sleep(0.5)
    drain()
    sink.close(linger=0)
    context.term()
    print(json.dumps({"workloads": results, "received": received[0]}), flush=True)


def _measure(strategy: Any, spec: tuple[str, int, int, int, tuple[int, int], int], quick: bool, endpoint: str,
             drain: Any) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    from ringscope.agent.tf_distribute import TimedStepRunner, start_agent
    from ringscope.trainers import common
    from ringscope.trainers.tf_trainer import build_model

    dataset, width, depth, batch, rounds_by_mode, block = spec
    # TF start-up and tracing take ~20 s of the quick budget: a third of the rounds DDP runs.
    rounds = rounds_by_mode[0] // 3 if quick else rounds_by_mode[1]
    global_batch = batch * strategy.num_replicas_in_sync
    data = common.load_dataset(dataset, model_width=width)
    model_args = argparse.Namespace(slow_rank=None, model_width=width, model_depth=depth)
    pipeline = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).repeat().batch(
        global_batch, drop_remainder=True)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def make() -> tuple[Any, Any]:
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = build_model(model_args, data.num_features, data.num_classes)
            optimizer = keras.optimizers.SGD(0.05)
            optimizer.build(model.trainable_variables)
        return model, optimizer

    def plain_loop() -> Any:
        model, optimizer = make()
        iterator = iter(strategy.experimental_distribute_dataset(pipeline))

        def replica(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step(batch_: Any) -> Any:
            return strategy.reduce("SUM", strategy.run(replica, args=batch_), axis=None)

        def step() -> None:
            train_step(next(iterator)).numpy()

        return step

    model, optimizer = make()
    telemetry = start_agent(strategy, endpoint=endpoint, run_id="bench-tf", sample_devices=False)
    runner = TimedStepRunner(strategy, model, optimizer, loss_fn, global_batch_size=global_batch, telemetry=telemetry)
    inst_iterator = iter(strategy.experimental_distribute_dataset(pipeline))
    steps = {"baseline": plain_loop(), "control": plain_loop(), "instrumented": lambda: runner.run_step(inst_iterator)}

    def run_block(variant: str) -> list[float]:
        step, times = steps[variant], []
        for _ in range(block):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        return times

    times, cpu = interleave(run_block, rounds, after_round=drain)
    telemetry.close()
    return summarize(times, cpu, f"{dataset} width {width} depth {depth} batch {batch}/replica", block)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2] == "quick")
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)
