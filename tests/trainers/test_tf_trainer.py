"""The TensorFlow reference trainer end to end: real processes, real ZeroMQ, real TF_CONFIG workers.

Each module fixture runs one training and several tests read it (TF import costs ~4 s CPU per process):

* mirrored: 2 logical CPU replicas, replica 1 slowed by SLOW_MS, DATA_DELAY_MS of loader latency, checkpoints;
* resumed_fit: continues from mirrored's checkpoints with ``--fit`` (callback path + restore event);
* multi_worker: 2 worker processes (``--spawn-workers 2``), worker 0 slowed by SLOW_MS.

Tolerances survive a loaded 2-core machine: the stall gap is checked within [0.5, 1.6] x the injected delay
(medians over steady steps), the data wait within [0.7 x, 1 x + 40 ms] of the injected latency.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ringscope.agent.schema import EventKind, Step
from ringscope.trainers import common

pytestmark = pytest.mark.slow

SLOW_MS = 80.0
DATA_DELAY_MS = 60.0
STEPS = 30
RUN_TIMEOUT_S = 150


@dataclass
class Run:
    """One finished trainer process and what its receiver got."""

    returncode: int
    output: str
    receiver: Any
    result: dict[str, Any]


def _run(args: list[str], receiver: Any, *, timeout_s: float = RUN_TIMEOUT_S) -> Run:
    env = dict(os.environ, RINGSCOPE_ENDPOINT=receiver.endpoint, RINGSCOPE_DEVICE_INTERVAL_S="0.2",
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "ringscope.trainers.tf_trainer", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()  # --spawn-workers kills its own workers when it dies with a timeout of its own
            proc.wait(10)
    assert proc.returncode == 0, f"trainer failed ({proc.returncode}):\n{output[-4000:]}"
    return Run(proc.returncode, output, receiver, common.parse_result(output))


def _wait_for_steps(receiver: Any, ranks: int, steps: int) -> None:
    ok = receiver.wait_for(lambda r: all(len(r.steps(k)) >= steps for k in range(ranks)), timeout_s=10)
    assert ok, {k: len(receiver.steps(k)) for k in range(ranks)}


def _steady(steps: list[Step], field: str) -> float:
    values = [getattr(s, field) for s in steps if not s.first_batch and s.step >= 3]
    return statistics.median(values)


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tf-ckpt")


@pytest.fixture(scope="module")
def mirrored(receiver_factory: Callable[[], Any], checkpoint_dir: Path) -> Run:
    receiver = receiver_factory()
    run = _run(["--strategy", "mirrored", "--devices", "2", "--steps", str(STEPS), "--batch-size", "16",
                "--slow-rank", "1", "--slow-ms", str(SLOW_MS), "--data-delay-ms", str(DATA_DELAY_MS),
                "--checkpoint-dir", str(checkpoint_dir), "--checkpoint-every-steps", "10", "--log-every", "0"],
               receiver)
    _wait_for_steps(receiver, 2, STEPS)
    return run


@pytest.fixture(scope="module")
def resumed_fit(mirrored: Run, receiver_factory: Callable[[], Any], checkpoint_dir: Path) -> Run:
    receiver = receiver_factory()
    run = _run(["--strategy", "mirrored", "--devices", "2", "--steps", str(STEPS + 10), "--batch-size", "16",
                "--checkpoint-dir", str(checkpoint_dir), "--resume", "--fit", "--log-every", "0"], receiver)
    _wait_for_steps(receiver, 2, 10)
    return run


@pytest.fixture(scope="module")
def multi_worker(receiver_factory: Callable[[], Any]) -> Run:
    receiver = receiver_factory()
    run = _run(["--strategy", "multi_worker_mirrored", "--spawn-workers", "2", "--steps", str(STEPS),
                "--batch-size", "16", "--slow-rank", "0", "--slow-ms", str(SLOW_MS), "--log-every", "0",
                "--worker-timeout-s", str(RUN_TIMEOUT_S - 20)], receiver)
    _wait_for_steps(receiver, 2, STEPS)
    return run


# ---- MirroredStrategy --------------------------------------------------------------------------------------------


def test_mirrored_identity_and_one_valid_step_per_replica_per_step(mirrored: Run) -> None:
    rec = mirrored.receiver
    assert rec.rejected == []
    hello = rec.hellos()[0]
    assert (hello.framework, hello.strategy, hello.world_size, hello.ranks) == ("tensorflow", "mirrored", 2, [0, 1])
    assert len({h.agent_id for h in rec.hellos()}) == 1  # one process, one agent, two replicas
    for rank in (0, 1):
        steps = rec.steps(rank)
        assert [s.step for s in steps] == list(range(STEPS))
        assert steps[0].first_batch and not any(s.first_batch for s in steps[1:])
        for s in steps:
            assert s.samples == 16 and s.loss is not None and s.comm_exposed_s == s.comm_s
            assert s.data_wait_s + s.compute_s + s.comm_exposed_s <= s.step_s + 1e-3
    assert mirrored.result["steps"] == STEPS and mirrored.result["final_loss"] > 0


def test_mirrored_slowed_replica_has_the_smallest_stall_and_the_other_waits_about_the_delay(mirrored: Run) -> None:
    rec = mirrored.receiver
    slow_wait, fast_wait = _steady(rec.steps(1), "comm_exposed_s"), _steady(rec.steps(0), "comm_exposed_s")
    assert slow_wait < fast_wait
    gap_ms = (fast_wait - slow_wait) * 1000
    assert 0.5 * SLOW_MS <= gap_ms <= 1.6 * SLOW_MS, f"stall gap {gap_ms:.1f} ms for {SLOW_MS} ms injected"
    assert _steady(rec.steps(1), "compute_s") * 1000 >= 0.9 * SLOW_MS  # the delay sits in its compute


def test_mirrored_injected_data_delay_shows_as_data_wait(mirrored: Run) -> None:
    wait_ms = _steady(mirrored.receiver.steps(0), "data_wait_s") * 1000
    assert 0.7 * DATA_DELAY_MS <= wait_ms <= DATA_DELAY_MS + 40, f"data wait {wait_ms:.1f} ms for {DATA_DELAY_MS}"


def test_mirrored_checkpoints_are_reported(mirrored: Run) -> None:
    saved = mirrored.receiver.events(EventKind.CHECKPOINT_SAVED)
    assert [e.step for e in saved] == [10, 20, 30]
    assert all(e.bytes and e.bytes > 1000 and e.duration_s is not None for e in saved)


# ---- model.fit path with restore ---------------------------------------------------------------------------------


def test_fit_callback_records_steps_after_a_restore(resumed_fit: Run) -> None:
    rec = resumed_fit.receiver
    restored = rec.events(EventKind.CHECKPOINT_RESTORED)
    assert restored and restored[0].step == STEPS
    assert resumed_fit.result["resumed_from"] == STEPS and resumed_fit.result["fit"] is True
    for rank in (0, 1):
        steps = rec.steps(rank)
        assert [s.step for s in steps] == list(range(STEPS, STEPS + 10))
        # The fit path cannot separate phases: unknown, never 0.
        assert all(s.data_wait_s is None and s.compute_s is None and s.comm_exposed_s is None for s in steps)
        assert all(s.step_s > 0 and s.samples == 16 and s.loss is not None for s in steps)


# ---- MultiWorkerMirroredStrategy ---------------------------------------------------------------------------------


def test_multi_worker_identity_from_tf_config(multi_worker: Run) -> None:
    rec = multi_worker.receiver
    assert rec.rejected == []
    by_agent = {h.agent_id: h for h in rec.hellos()}
    assert sorted(h.ranks[0] for h in by_agent.values()) == [0, 1]
    assert {(h.strategy, h.world_size, h.node_rank == h.rank) for h in by_agent.values()} == {
        ("multi_worker_mirrored", 2, True)}
    assert len({h.run_id for h in by_agent.values()}) == 1  # the launcher gives both workers one run id
    assert len({h.pid for h in by_agent.values()}) == 2
    assert [s.step for s in rec.steps(1)] == list(range(STEPS))


def test_multi_worker_slowed_worker_is_identified(multi_worker: Run) -> None:
    rec = multi_worker.receiver
    slow_wait, fast_wait = _steady(rec.steps(0), "comm_exposed_s"), _steady(rec.steps(1), "comm_exposed_s")
    assert slow_wait < fast_wait
    gap_ms = (fast_wait - slow_wait) * 1000
    assert 0.5 * SLOW_MS <= gap_ms <= 1.6 * SLOW_MS, f"stall gap {gap_ms:.1f} ms for {SLOW_MS} ms injected"


# ---- No collector, bad options -----------------------------------------------------------------------------------


def test_training_without_a_collector_finishes_normally() -> None:
    env = dict(os.environ, RINGSCOPE_ENDPOINT="tcp://127.0.0.1:1", TF_CPP_MIN_LOG_LEVEL="2")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ringscope.trainers.tf_trainer", "--steps", "5", "--log-every", "0"],
                         env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert common.parse_result(out.stdout)["steps"] == 5
    assert time.monotonic() - started < RUN_TIMEOUT_S


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--amp", "--device", "cpu"], "--amp needs a GPU"),
        (["--spawn-workers", "2"], "--spawn-workers needs --strategy multi_worker_mirrored"),
        (["--devices", "2", "--slow-rank", "5", "--slow-ms", "10"], "--slow-rank 5 does not exist"),
        (["--worker-timeout-s", "5"], "--worker-timeout-s only applies with --spawn-workers"),
    ],
)
def test_bad_options_are_refused_before_tensorflow_starts(args: list[str], message: str) -> None:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ringscope.trainers.tf_trainer", *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert time.monotonic() - started < 20  # no TensorFlow import
