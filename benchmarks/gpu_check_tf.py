"""GPU check of the TensorFlow integration: MirroredStrategy on every visible GPU, NVML readings, the figures.

    python -m benchmarks.gpu_check_tf [--steps 60] [--width 2048] [--slow-ms 50]

Runs the reference MLP with ``TimedStepRunner`` on all visible GPUs (NCCL all-reduce when all devices are GPUs),
slows replica 1 by ``--slow-ms`` and prints per replica the median data wait, compute, comm and exposed comm, the
NVML utilization / power / memory of each GPU during the run, and two sanity checks:

* on GPU ``tf.timestamp()`` after a GPU op may mark enqueue rather than completion: the check compares the sum of
  in-graph phases with the host step time (phases far below the step mean timestamps are not trustworthy);
* the slowed replica should show the smallest exposed comm, the others about ``--slow-ms`` more.

Then the zero-code path (``ringscope run`` on an unmodified script: ``replica_timing``) on the same model: a plain
custom loop whose ``strategy.run`` function is wrapped as the injection wraps it, the figures taken after each step,
with the same two checks, and the loop's step time with vs without the wrapper (interleaved blocks): the wrapper
must add no device synchronization, so the ratio must stay near 1.

Exits 2 with a clear message when TensorFlow sees no GPU (this cannot run on the CPU-only development machine).
Not part of ``python -m benchmarks``: it needs a GPU and is run by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

from benchmarks.tf_workload import refuse_timing_failure, replica_step


def _nvml_poller(stop: threading.Event, readings: list[dict[str, Any]]) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # NVML absent: say so, keep running the TF figures
        readings.append({"error": f"NVML unavailable: {type(exc).__name__}: {exc}"})
        return
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    while not stop.is_set():
        for index, handle in enumerate(handles):
            row: dict[str, Any] = {"gpu": index, "ts": time.time()}
            for key, call in (("util_pct", lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                              ("power_w", lambda h: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                              ("mem_used_gib", lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30),
                              ("sm_clock_mhz", lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))):
                try:
                    row[key] = float(call(handle))
                except Exception:  # a board may not support a reading: leave it out, never 0
                    row[key] = None
            readings.append(row)
        stop.wait(0.25)
    pynvml.nvmlShutdown()


def main() -> int:
    """Run the check; 0 when the figures look sane, 1 when a check fails, 2 without a GPU."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check_tf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256, help="per replica")
    parser.add_argument("--slow-ms", type=float, default=50.0)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        print("gpu_check_tf: TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') is empty); run this on "
              "a machine with NVIDIA GPUs and a CUDA build of TensorFlow", file=sys.stderr)
        return 2
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    strategy = tf.distribute.MirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    from ringscope.agent.tf_distribute import TimedStepRunner

    slow_rank = 1 if replicas > 1 else None

    def sleep_then_pass(x: Any) -> Any:
        time.sleep(args.slow_ms / 1000.0)
        return x

    class SlowReplica(keras.layers.Layer):  # type: ignore[misc]
        def call(self, inputs: Any) -> Any:
            context = tf.distribute.get_replica_context()
            replica = context.replica_id_in_sync_group if context is not None else 0
            if slow_rank is None:
                return inputs
            return tf.cond(tf.equal(replica, slow_rank),
                           lambda: tf.ensure_shape(tf.numpy_function(sleep_then_pass, [inputs], inputs.dtype,
                                                                     stateful=True), inputs.shape),
                           lambda: tf.identity(inputs))

        def compute_output_shape(self, input_shape: Any) -> Any:
            return input_shape

    features = 512
    with strategy.scope():
        model = keras.Sequential([keras.Input((features,)), SlowReplica(),
                                  *[keras.layers.Dense(args.width, activation="relu") for _ in range(4)],
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
    global_batch = args.batch_size * replicas
    rng = np.random.default_rng(0)
    x = rng.standard_normal((global_batch * 8, features), dtype=np.float32)
    y = rng.integers(0, 10, global_batch * 8)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch, drop_remainder=True)
    iterator = iter(strategy.experimental_distribute_dataset(data))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    runner = TimedStepRunner(strategy, model, optimizer, loss_fn, global_batch_size=global_batch)

    stop, readings = threading.Event(), []
    poller = threading.Thread(target=_nvml_poller, args=(stop, readings), daemon=True)
    poller.start()
    results = [runner.run_step(iterator) for _ in range(args.steps)]
    stop.set()
    poller.join(5)

    steady = results[5:]
    per_replica = {}
    for index in range(replicas):
        pick = [r.replicas[index] for r in steady]
        per_replica[index] = {
            "compute_ms": statistics.median(p.compute_s for p in pick) * 1e3,
            "comm_ms": statistics.median(p.comm_s for p in pick) * 1e3,
            "comm_exposed_ms": statistics.median(p.comm_exposed_s for p in pick) * 1e3,
        }
    step_ms = statistics.median(r.step_s for r in steady) * 1e3
    wait_ms = statistics.median(r.data_wait_s for r in steady) * 1e3
    print(json.dumps({"replicas": replicas, "devices": strategy.extended.worker_devices, "step_ms": step_ms,
                      "data_wait_ms": wait_ms, "per_replica": per_replica,
                      "nvml": readings[-2 * max(1, replicas):]}, indent=2, default=str))
    failures = _phase_failures(per_replica, wait_ms, step_ms, slow_rank, args.slow_ms,
                               hint=": timestamps mark enqueue?")
    failures += _zero_code_check(strategy, model, optimizer, loss_fn, iterator, global_batch, args, slow_rank)
    for failure in failures:
        print("CHECK FAILED:", failure, file=sys.stderr)
    print("gpu_check_tf:", "OK" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def _phase_failures(per_replica: dict[int, dict[str, float]], wait_ms: float, step_ms: float,
                    slow_rank: int | None, slow_ms: float, prefix: str = "", hint: str = "") -> list[str]:
    """Whether replica 0's in-graph phases (with ``wait_ms`` of data wait) cover the host step, and the slow
    replica's injected delay shows as replica 0's stall."""
    failures = []
    fast = per_replica[0]
    covered = (fast["compute_ms"] + fast["comm_exposed_ms"] + wait_ms) / step_ms
    if covered < 0.5:
        failures.append(f"{prefix}in-graph phases cover only {covered:.0%} of the host step{hint}")
    if slow_rank is not None:
        gap = fast["comm_exposed_ms"] - per_replica[slow_rank]["comm_exposed_ms"]
        if not 0.5 * slow_ms <= gap <= 1.6 * slow_ms:
            failures.append(f"{prefix}stall gap {gap:.1f} ms for {slow_ms} ms injected on replica {slow_rank}")
    return failures


def _zero_code_check(strategy: Any, model: Any, optimizer: Any, loss_fn: Any, iterator: Any, global_batch: int,
                     args: argparse.Namespace, slow_rank: int | None) -> list[str]:
    """The in-graph replica timing of zero-code runs on GPUs (NCCL all-reduce): figures and overhead."""
    import tensorflow as tf

    from ringscope.agent.tf_distribute import replica_timing

    replica_timing.install_all_reduce_hook()
    replica = replica_step(model, optimizer, loss_fn, global_batch)
    timed_replica = replica_timing.timed_replica_fn(replica, refuse_timing_failure)

    @tf.function
    def plain_step(batch: Any) -> Any:
        return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

    @tf.function
    def timed_step(batch: Any) -> Any:
        return strategy.reduce("SUM", strategy.run(timed_replica, args=batch), axis=None)

    times: dict[str, list[float]] = {"plain": [], "timed": []}
    figures: list[dict[int, Any]] = []
    for round_index in range(args.steps // 4 + 2):
        for name in (("plain", "timed") if round_index % 2 == 0 else ("timed", "plain")):
            for _ in range(4):
                started = time.perf_counter()
                (timed_step if name == "timed" else plain_step)(next(iterator)).numpy()
                times[name].append(time.perf_counter() - started)
                if name == "timed":  # what the zero-code hooks do after a step; drained below, as the sender does
                    end = time.time()
                    replica_timing.COLLECTOR.submit(end - (time.perf_counter() - started), end, figures.append)
                    replica_timing.COLLECTOR.drain()
    steady = figures[4:]
    per_replica = {}
    for rank in sorted(steady[-1]):
        picks = [f[rank] for f in steady if rank in f and f[rank].compute_s is not None]
        per_replica[rank] = {"data_wait_ms": statistics.median(p.data_wait_s for p in picks) * 1e3,
                             "compute_ms": statistics.median(p.compute_s for p in picks) * 1e3,
                             "comm_exposed_ms": statistics.median(p.comm_s for p in picks) * 1e3}
    plain_ms = statistics.median(times["plain"][4:]) * 1e3
    timed_ms = statistics.median(times["timed"][4:]) * 1e3
    print(json.dumps({"zero_code": {"per_replica": per_replica, "step_ms_plain": plain_ms, "step_ms_timed": timed_ms,
                                    "ratio": timed_ms / plain_ms}}, indent=2))
    failures = _phase_failures(per_replica, per_replica[0]["data_wait_ms"], timed_ms, slow_rank, args.slow_ms,
                               prefix="zero-code: ")
    if timed_ms / plain_ms > 1.05:
        failures.append(f"zero-code: step {timed_ms:.2f} ms timed vs {plain_ms:.2f} ms plain (device sync added?)")
    return failures


if __name__ == "__main__":
    sys.exit(main())
