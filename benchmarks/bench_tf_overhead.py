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

import json
from typing import Any

from benchmarks.overhead import WORKLOADS, interleave, summarize, summary_rows
from benchmarks.tf_workload import (
    MessageSink,
    Workload,
    block_runner,
    cpu_mirrored_strategy,
    main,
    replica_step,
    run_child,
    workload,
)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the comparison in a child process and return the benchmark rows."""
    payload = run_child("benchmarks.bench_tf_overhead", quick, "TF overhead")
    rows: list[dict[str, Any]] = []
    for name, result in payload["workloads"].items():
        rows += summary_rows("tf_overhead", name, result, "MirroredStrategy 2 CPU replicas, vs a plain custom loop")
    rows.append({"benchmark": "tf_overhead", "metric": "messages_received", "value": float(payload["received"]),
                 "unit": "msgs", "note": "telemetry really sent to a ROUTER socket (batched frames)"})
    return rows


def _child(quick: bool) -> None:
    strategy = cpu_mirrored_strategy()
    sink = MessageSink()
    results = {name: _measure(workload(strategy, spec, quick), sink) for name, spec in WORKLOADS.items()}
    sink.close()
    print(json.dumps({"workloads": results, "received": sink.received}), flush=True)


def _measure(work: Workload, sink: MessageSink) -> dict[str, Any]:
    import tensorflow as tf

    from ringscope.agent.tf_distribute import TimedStepRunner, start_agent

    strategy = work.strategy

    def plain_loop() -> Any:
        model, optimizer = work.build()
        iterator = work.iterator()
        replica = replica_step(model, optimizer, work.loss_fn, work.global_batch)

        @tf.function
        def train_step(batch_: Any) -> Any:
            return strategy.reduce("SUM", strategy.run(replica, args=batch_), axis=None)

        def step() -> None:
            train_step(next(iterator)).numpy()

        return step

    model, optimizer = work.build()
    telemetry = start_agent(strategy, endpoint=sink.endpoint, run_id="bench-tf", sample_devices=False)
    runner = TimedStepRunner(strategy, model, optimizer, work.loss_fn, global_batch_size=work.global_batch,
                             telemetry=telemetry)
    inst_iterator = work.iterator()
    steps = {"baseline": plain_loop(), "control": plain_loop(), "instrumented": lambda: runner.run_step(inst_iterator)}
    times, cpu = interleave(block_runner(steps, work.block), work.rounds, after_round=sink.drain)
    telemetry.close()
    return summarize(times, cpu, work.description, work.block)


if __name__ == "__main__":
    main(run, _child)
