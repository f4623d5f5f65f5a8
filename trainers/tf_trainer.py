"""Reference TensorFlow training (MirroredStrategy / MultiWorkerMirroredStrategy) reporting to Ringscope.

    python -m ringscope.trainers.tf_trainer --strategy mirrored --devices 2 --steps 100
    python -m ringscope.trainers.tf_trainer --strategy multi_worker_mirrored --spawn-workers 2 --steps 100
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:12346"]}, "task": {"type": "worker",
    "index": 0}}' python -m ringscope.trainers.tf_trainer --strategy multi_worker_mirrored   # one process per worker

Same MLP, data sets, options and injected delays as the DDP trainer (``ringscope.trainers.common``); ``--batch-size``
is per replica there and here, so the global batch is ``--batch-size x replicas`` in both. On CPU, MirroredStrategy gets
``--devices`` logical CPU devices (split before any op runs); each MultiWorker worker runs one CPU replica.
``--spawn-workers N`` starts N local worker processes with free localhost ports (no TensorFlow in the launcher).
The custom loop reports through ``ringscope.agent.tf_distribute.TimedStepRunner``; ``--fit`` uses ``model.fit`` with
``RingscopeCallback`` instead (coarser figures: see that callback's docstring).

Thin on purpose: it uses the agent like a user would. It must never import tensorflow before the options are
checked (``--help`` and bad options answer fast), and never leave worker processes behind.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from ringscope.trainers import common

STRATEGIES = ("mirrored", "multi_worker_mirrored")


# ---- Options -----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The trainer's options: the shared ones (``ringscope.trainers.common``) plus the TensorFlow ones."""
    parser = argparse.ArgumentParser(prog="python -m ringscope.trainers.tf_trainer",
                                     description=__doc__.split("\n\n")[0])
    common.add_common_arguments(parser)
    tf_group = parser.add_argument_group("tensorflow")
    tf_group.add_argument("--strategy", choices=STRATEGIES, default="mirrored", help="tf.distribute strategy")
    tf_group.add_argument("--devices", type=int, default=None,
                          help="MirroredStrategy replicas (CPU: logical devices, default 2; GPU: default all)")
    tf_group.add_argument("--spawn-workers", type=int, default=None, metavar="N",
                          help="multi_worker_mirrored: start N local worker processes with free ports")
    tf_group.add_argument("--worker-timeout-s", type=float, default=None,
                          help="with --spawn-workers: kill all workers after this many seconds")
    tf_group.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="where replicas run")
    tf_group.add_argument("--amp", action="store_true", help="mixed precision (bfloat16); GPU only")
    tf_group.add_argument("--fit", action="store_true", help="train with model.fit + RingscopeCallback")
    # The DDP trainer calls input-pipeline parallelism --loader-workers; accept the TF-flavoured name too.
    tf_group.add_argument("--input-parallelism", dest="loader_workers", type=int, help="same as --loader-workers")
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Refuse bad options (exit code 2) before TensorFlow is imported; return the expected world size."""
    if args.devices is not None and args.devices < 1:
        parser.error(f"--devices must be at least 1, got {args.devices}")
    if args.spawn_workers is not None:
        if args.strategy != "multi_worker_mirrored":
            parser.error(f"--spawn-workers needs --strategy multi_worker_mirrored, got --strategy {args.strategy}")
        if args.spawn_workers < 1:
            parser.error(f"--spawn-workers must be at least 1, got {args.spawn_workers}")
        if os.environ.get("TF_CONFIG"):
            parser.error("--spawn-workers writes TF_CONFIG for its workers; unset TF_CONFIG or drop --spawn-workers")
    if args.worker_timeout_s is not None and args.spawn_workers is None:
        parser.error("--worker-timeout-s only applies with --spawn-workers N")
    if args.amp and args.device == "cpu":
        parser.error("--amp needs a GPU (mixed precision is not supported on CPU here); drop --amp or --device cpu")
    if args.strategy == "mirrored":
        world = args.devices or 2  # GPU runs re-check against the real device count once TF is up
    else:
        from ringscope.agent.tf_distribute.identity import worker_identity

        if args.devices not in (None, 1) and args.device != "gpu":
            parser.error("--devices applies to MirroredStrategy; a multi_worker_mirrored CPU worker has 1 replica")
        try:
            workers = args.spawn_workers or worker_identity().num_workers
        except ValueError as exc:
            parser.error(str(exc))
        world = workers * (args.devices or 1)
    common.check_common_arguments(parser, args, world)
    return world


# ---- Launcher (no TensorFlow here) -------------------------------------------------------------------------------


def spawn_workers(argv: list[str], workers: int, timeout_s: float | None) -> int:
    """Run one worker process per TF_CONFIG task, relay their output with a prefix, print a combined result."""
    cluster = [f"localhost:{port}" for port in common.free_ports(workers)]
    child_argv = _without_option(argv, "--spawn-workers", takes_value=True)
    child_argv = _without_option(child_argv, "--worker-timeout-s", takes_value=True)
    env_base = dict(os.environ)
    # All workers of one training report under one run id, so the app groups them.
    env_base.setdefault("RINGSCOPE_RUN_ID", f"tf-mwms-{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S')}")
    procs: list[subprocess.Popen[str]] = []
    outputs: list[list[str]] = [[] for _ in range(workers)]
    relays: list[threading.Thread] = []
    try:
        for index in range(workers):
            env = dict(env_base)
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
            proc = subprocess.Popen(
                [sys.executable, "-m", "ringscope.trainers.tf_trainer", *child_argv],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            )
            procs.append(proc)
            relay = threading.Thread(target=_relay, args=(proc, index, outputs[index]), daemon=True)
            relay.start()
            relays.append(relay)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.returncode not in (None, 0)]
            if failed or (deadline is not None and time.monotonic() > deadline):
                reason = "a worker failed" if failed else f"--worker-timeout-s {timeout_s} passed"
                print(f"tf_trainer launcher: {reason}; stopping all workers", file=sys.stderr, flush=True)
                break
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait(10)
        for relay in relays:
            relay.join(5)
    codes = [p.returncode for p in procs]
    if any(code != 0 for code in codes):
        print(f"tf_trainer launcher: worker exit codes {codes}", file=sys.stderr, flush=True)
        return next(code for code in codes if code != 0) or 1
    results = [common.parse_result("\n".join(lines)) for lines in outputs]
    common.print_result({
        "strategy": "multi_worker_mirrored", "workers": results, "steps": results[0]["steps"],
        "final_loss": results[0]["final_loss"], "world_size": results[0]["world_size"],
    })
    return 0


def _relay(proc: subprocess.Popen[str], index: int, sink: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sink.append(line.rstrip("\n"))
        print(f"[worker {index}] {line}", end="", flush=True)


def _without_option(argv: list[str], name: str, *, takes_value: bool) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == name:
            skip = takes_value
            continue
        if item.startswith(name + "="):
            continue
        out.append(item)
    return out


# ---- Training (TensorFlow imported from here on) -----------------------------------------------------------------
# Functions below import tensorflow inside their bodies: this module is imported by the launcher and by --help.


def setup_devices(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """Choose the replica devices (before any op runs) and return their names."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if args.device == "gpu" and not gpus:
        parser.error("--device gpu: TensorFlow sees no GPU on this machine; use --device cpu or auto")
    use_gpu = bool(gpus) and args.device != "cpu"
    if args.amp and not use_gpu:
        parser.error("--amp needs a GPU and none is used (no GPU visible or --device cpu); drop --amp")
    if not use_gpu:
        tf.config.set_visible_devices([], "GPU")
        local = (args.devices or 2) if args.strategy == "mirrored" else 1
        cpu = tf.config.list_physical_devices("CPU")[0]
        if local > 1:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * local)
        if args.strategy == "multi_worker_mirrored":
            return []  # listing logical devices would start the context before MultiWorker configures it
        return [d.name for d in tf.config.list_logical_devices("CPU")][:local]
    wanted = args.devices or len(gpus)
    if wanted > len(gpus):
        parser.error(f"--devices {wanted} but TensorFlow sees {len(gpus)} GPU(s); lower --devices")
    tf.config.set_visible_devices(gpus[:wanted], "GPU")
    if args.strategy == "multi_worker_mirrored":
        return []
    return [d.name for d in tf.config.list_logical_devices("GPU")][:wanted]


def build_model(args: argparse.Namespace, num_features: int, num_classes: int) -> Any:
    """The MLP of both reference trainers; on --slow-rank a first layer that sleeps on that replica."""
    import keras

    layers: list[Any] = [keras.Input((num_features,))]
    if args.slow_rank is not None:
        layers.append(_slow_replica_layer(args))
    layers += [keras.layers.Dense(args.model_width, activation="relu") for _ in range(args.model_depth)]
    layers.append(keras.layers.Dense(num_classes, dtype="float32"))  # logits in float32 also under --amp
    return keras.Sequential(layers)


def _slow_replica_layer(args: argparse.Namespace) -> Any:
    import keras
    import tensorflow as tf

    slow_rank = int(args.slow_rank)

    def sleep_then_pass(x: Any) -> Any:
        common.extra_compute(args, slow_rank)
        return x

    class SlowReplica(keras.layers.Layer):  # type: ignore[misc]
        """Identity layer; on the replica whose global id is --slow-rank it first sleeps --slow-ms."""

        def call(self, inputs: Any) -> Any:
            context = tf.distribute.get_replica_context()
            replica = context.replica_id_in_sync_group if context is not None else 0

            def slowed() -> Any:
                out = tf.numpy_function(sleep_then_pass, [inputs], inputs.dtype, stateful=True)
                return tf.ensure_shape(out, inputs.shape)

            return tf.cond(tf.equal(replica, slow_rank), slowed, lambda: tf.identity(inputs))

        def compute_output_shape(self, input_shape: Any) -> Any:
            return input_shape

    return SlowReplica()


def step_indices(dataset: common.Dataset, args: argparse.Namespace, ranks: list[int], world: int,
                 first_step: int, steps: int) -> Any:
    """Sample indices ``[steps, local replicas, batch]`` for this process: the DDP trainer's sharding per rank."""
    import numpy as np

    per_epoch = common.steps_per_epoch(dataset, args.batch_size, world)
    out = np.empty((steps, len(ranks), args.batch_size), dtype=np.int64)
    shards: dict[tuple[int, int], Any] = {}
    for row, step in enumerate(range(first_step, first_step + steps)):
        epoch, position = divmod(step, per_epoch)
        for col, rank in enumerate(ranks):
            key = (rank, epoch)
            if key not in shards:
                shards = {k: v for k, v in shards.items() if k[1] >= epoch}
                shards[key] = common.shard_indices(len(dataset.x_train), rank, world, epoch=epoch, seed=args.seed)
            out[row, col] = shards[key][position * args.batch_size:(position + 1) * args.batch_size]
    return out


def make_dataset_fn(dataset: common.Dataset, args: argparse.Namespace, indices: Any) -> Any:
    """A ``dataset_fn`` for ``distribute_datasets_from_function``: per-replica batches in replica order.

    One element = one step's batches for all local replicas, fetched with one ``--data-delay-ms`` (one input
    pipeline per process pays it once per step, as each DDP rank's loader does), then unbatched into replicas.
    """
    import numpy as np
    import tensorflow as tf

    local, batch, features = indices.shape[1], indices.shape[2], dataset.num_features

    def fetch(ix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, y = common.fetch_batch(dataset.x_train, dataset.y_train, ix.reshape(-1), args.data_delay_ms)
        return x.reshape(local, batch, features), y.reshape(local, batch)

    def load(ix: Any) -> tuple[Any, Any]:
        x, y = tf.numpy_function(fetch, [ix], (tf.float32, tf.int64), stateful=True)
        return tf.ensure_shape(x, (local, batch, features)), tf.ensure_shape(y, (local, batch))

    def dataset_fn(input_context: Any = None) -> Any:
        ds = tf.data.Dataset.from_tensor_slices(indices)
        parallel = args.loader_workers or None
        ds = (ds.map(load, num_parallel_calls=parallel, deterministic=True) if parallel else ds.map(load)).unbatch()
        options = tf.data.Options()
        if args.loader_workers:
            ds = ds.prefetch(args.loader_workers * args.prefetch * local)
        else:
            # tf.data would otherwise add a prefetch after the map and hide the loader latency we inject.
            options.experimental_optimization.inject_prefetch = False
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return ds.with_options(options)

    return dataset_fn


def distributed_data(strategy: Any, dataset: common.Dataset, args: argparse.Namespace, indices: Any) -> Any:
    """The distributed data set. Without loader workers nothing is prefetched: the step waits for each batch.

    The distributed iterator keeps one batch per replica in flight by default, which would hide the injected
    loader latency behind the step; ``experimental_per_replica_buffer_size=0`` turns that off, matching the DDP
    trainer's ``--loader-workers 0`` (batches built in the training loop when it asks for them).
    """
    import tensorflow as tf

    buffer = args.prefetch if args.loader_workers else 0
    options = tf.distribute.InputOptions(experimental_per_replica_buffer_size=buffer)
    return strategy.distribute_datasets_from_function(make_dataset_fn(dataset, args, indices), options=options)


def train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Train in this process (one MirroredStrategy process, or one MultiWorker worker) and print the result."""
    import keras
    import tensorflow as tf

    device_names = setup_devices(args, parser)
    if args.strategy == "multi_worker_mirrored":
        strategy: Any = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy(device_names)
    if args.amp:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")  # bf16 needs no loss scaling
    from ringscope.agent.tf_distribute import (
        TimedStepRunner,
        restore_latest,
        save_checkpoint,
        start_agent,
        strategy_ranks,
    )

    ranks, world, identity = strategy_ranks(strategy)
    common.check_common_arguments(parser, args, world)  # the real replica count (GPU runs) may differ
    dataset = common.load_dataset(args.dataset, seed=args.seed, model_width=args.model_width)
    steps = common.total_steps(args, dataset, world)
    keras.utils.set_random_seed(args.seed)
    telemetry = None if args.no_agent else start_agent(strategy)
    try:
        with strategy.scope():
            model = build_model(args, dataset.num_features, dataset.num_classes)
            optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)  # the DDP trainer's (OPTIMIZER)
            optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        save_manager, restore_manager = _checkpoint_managers(tf, args, checkpoint, identity)
        first_step = 0
        if (args.resume or args.resume_latest) and restore_manager is not None:
            first_step = restore_latest(checkpoint, restore_manager, telemetry, rank=ranks[0]) or 0
        remaining = max(0, steps - first_step)
        global_batch = args.batch_size * world
        indices = step_indices(dataset, args, ranks, world, first_step, remaining)
        if args.fit:
            losses = _train_fit(args, strategy, model, optimizer, dataset, indices, telemetry, ranks, global_batch)
        else:
            runner = TimedStepRunner(
                strategy, model, optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                                       reduction=None),
                global_batch_size=global_batch, telemetry=telemetry, ranks=ranks, first_step=first_step,
            )
            iterator = iter(distributed_data(strategy, dataset, args, indices))
            schedule = common.CheckpointSchedule(args.checkpoint_every_steps, args.checkpoint_every_s)
            per_epoch = common.steps_per_epoch(dataset, args.batch_size, world)
            losses, step_times = [], []
            for _ in range(remaining):
                result = runner.run_step(iterator, epoch=runner.step // per_epoch)
                losses.append(result.loss)
                if not result.first_batch:
                    step_times.append(result.step_s)
                if args.log_every and runner.step % args.log_every == 0:
                    print(f"step {runner.step}/{steps} loss {result.loss:.4f} step {result.step_s * 1e3:.1f} ms "
                          f"data {result.data_wait_s * 1e3:.1f} ms", flush=True)
                if save_manager is not None and schedule.due(runner.step):
                    save_checkpoint(save_manager, telemetry, step=runner.step, rank=ranks[0])
        common.print_result({
            "strategy": args.strategy, "ranks": ranks, "world_size": world, "steps": steps,
            "steps_run": remaining, "resumed_from": first_step, "fit": args.fit,
            "final_loss": losses[-1] if losses else None,
            "median_step_s": None if args.fit else common.median(step_times),
            "footing": common.footing(args, model.count_params()),
        })
    except BaseException as exc:
        if telemetry is not None:
            telemetry.event("error", rank=ranks[0], text=f"{type(exc).__name__}: {exc}")
            telemetry.close(finished=False)
            telemetry = None
        raise
    finally:
        if telemetry is not None:
            telemetry.close()
    return 0


def _checkpoint_managers(tf: Any, args: argparse.Namespace, checkpoint: Any, identity: Any) -> tuple[Any, Any]:
    """(manager to save with, manager to restore from). Non-chief MultiWorker workers save to a scratch dir."""
    if not args.checkpoint_dir:
        return None, None
    restore = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
    if identity.is_chief:
        return restore, restore
    # Saving is collective under MultiWorker: every worker writes, only the chief's copy is kept.
    scratch = os.path.join(args.checkpoint_dir, f".worker-{identity.worker_rank}")
    return tf.train.CheckpointManager(checkpoint, scratch, max_to_keep=1), restore


def _train_fit(args: argparse.Namespace, strategy: Any, model: Any, optimizer: Any, dataset: common.Dataset,
               indices: Any, telemetry: Any, ranks: list[int], global_batch: int) -> list[float]:
    """``model.fit`` with ``RingscopeCallback`` (and ``BackupAndRestore`` when a checkpoint dir is given)."""
    import keras

    from ringscope.agent.tf_distribute import RingscopeCallback

    with strategy.scope():
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = distributed_data(strategy, dataset, args, indices)
    callbacks: list[Any] = []
    if args.checkpoint_dir:
        callbacks.append(keras.callbacks.BackupAndRestore(os.path.join(args.checkpoint_dir, "fit-backup")))
    callbacks.append(RingscopeCallback(telemetry, ranks=ranks, global_batch_size=global_batch))
    history = model.fit(data, epochs=1, steps_per_epoch=len(indices), callbacks=callbacks, verbose=0, shuffle=False)
    return [float(v) for v in history.history.get("loss", [])]


def main(argv: list[str] | None = None) -> int:
    """Entry point: check options, then launch workers or train in this process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if args.spawn_workers is not None:
        return spawn_workers(argv, args.spawn_workers, args.worker_timeout_s)
    return train(args, parser)


if __name__ == "__main__":
    sys.exit(main())
