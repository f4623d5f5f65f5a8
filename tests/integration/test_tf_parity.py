"""TensorFlow at parity with DDP: an unmodified script under ``ringscope run`` gets data wait, compute and AllReduce
stall per replica, and the report names the straggler with its cause.

The script (``scripts/tf_straggler.py``, no Ringscope import) has a known truth: every batch takes 40 ms to produce
(hidden by TensorFlow's prefetch under a ~65 ms step, so ~0 data wait), and replica 1's forward pass sleeps 60 ms
longer, so replica 0 waits ~60 ms in the gradient all-reduce of every step. Four trainings are recorded by a real
``ringscope record`` one after the other (sharing the 2 cores would blur the figures): Keras ``fit`` under
MirroredStrategy (2 CPU replicas), a custom loop under MirroredStrategy, one that runs 4 steps per call, and the loop
under MultiWorkerMirroredStrategy (2 worker processes). ``fit`` under MultiWorker fails with Keras 3.15 + TF 2.21
without Ringscope (the script's docstring), so the MultiWorker variant is the loop. A script under another strategy
trains unchanged and says once what is not measured.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.report import build_report
from tests.ports import free_port

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "scripts" / "tf_straggler.py"
SLOW_S, STEPS = 0.060, 40
PER_CALL = 4  # steps per call of the "loop-multi" training's step function
TIMEOUT_S = 180


@dataclass(frozen=True)
class Trained:
    """One training's output and its per-rank steady steps as recorded (first batches left out)."""

    outputs: list[str]
    errors: list[str]
    steps: dict[int, list[dict[str, float | None]]]
    session: Path
    run_id: str

    def median(self, rank: int, field: str) -> float:
        values = [s[field] for s in self.steps[rank] if s[field] is not None]
        assert values, f"rank {rank}: no {field} in {len(self.steps[rank])} steps"
        return float(statistics.median(values))  # type: ignore[type-var]

    def unknown_share(self, rank: int) -> float:
        steps = self.steps[rank]
        unknown = [s for s in steps if None in (s["data_wait_s"], s["compute_s"], s["comm_exposed_s"])]
        return len(unknown) / len(steps)

    def printed(self, key: str) -> float:
        values = [float(line.split()[1]) for out in self.outputs for line in out.splitlines() if line.startswith(key)]
        assert values, f"no {key} line in {self.outputs}"
        return float(statistics.median(values))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGSCOPE_")}
    env.update(OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", **extra)
    return env


def _run(endpoint: str, run_id: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "ringscope.gui.cli", "run", "--endpoint", endpoint, "--run-id", run_id, "--",
               sys.executable, *argv]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a MultiWorker worker that lost its peer ignores SIGTERM: SIGKILL the group
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate(timeout=10)
    return process.returncode, out, err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Trained]]:
    folder = tmp_path_factory.mktemp("tf-parity")
    session = folder / "parity.db"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    recorder = subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(session), "--bind",
                                 endpoint, "--progress-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    runs: dict[str, tuple[list[str], list[str]]] = {}
    try:
        for mode in ("fit", "loop"):
            code, out, err = _finish(_run(endpoint, f"tf-{mode}", [str(SCRIPT), mode, "--steps", str(STEPS)], _env()))
            assert code == 0, err[-3000:]
            runs[mode] = ([out], [err])
        code, out, err = _finish(_run(endpoint, "tf-loop-multi", [str(SCRIPT), "loop-multi", "--steps", str(STEPS),
                                                                  "--steps-per-call", str(PER_CALL)], _env()))
        assert code == 0, err[-3000:]
        runs["loop-multi"] = ([out], [err])
        cluster = [f"localhost:{free_port()}", f"localhost:{free_port()}"]
        workers = [_run(endpoint, "tf-loop-worker", [str(SCRIPT), "loop-worker", "--steps", str(STEPS)],
                        _env(TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                                   "task": {"type": "worker", "index": index}})))
                   for index in (0, 1)]
        finished = [_finish(worker) for worker in workers]
        assert [code for code, _, _ in finished] == [0, 0], [err[-2000:] for _, _, err in finished]
        runs["loop-worker"] = ([out for _, out, _ in finished], [err for _, _, err in finished])
        code, out, err = _finish(_run(endpoint, "tf-other", ["-c", OTHER_STRATEGY], _env()))
        assert code == 0, err[-3000:]
        runs["other"] = ([out], [err])
    finally:
        recorder.send_signal(signal.SIGINT)
        _, record_err = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, record_err[-2000:]
    trained = {}
    for mode, (outputs, errors) in runs.items():
        run_id = f"tf-{mode}"
        steps: dict[int, list[dict[str, float | None]]] = {}
        for row in _step_rows(session, run_id):
            steps.setdefault(int(row["rank"]), []).append(row)  # type: ignore[arg-type]
        trained[mode] = Trained(outputs, errors, steps, session, run_id)
    yield trained


def _step_rows(session: Path, run_id: str) -> list[dict[str, float | None]]:
    """The recorded steady steps of one run, as the report reads them (a missing figure is None)."""
    columns = load(session).for_run(run_id).steps
    fields = ("rank", "step", "data_wait_s", "compute_s", "comm_s", "comm_exposed_s", "step_s")
    rows = []
    for index in range(len(columns["step"])):
        if bool(columns["first_batch"][index]):
            continue
        row = {name: float(columns[name][index]) for name in fields}
        rows.append({name: None if math.isnan(value) else value for name, value in row.items()})
    return rows


# A Keras fit under OneDeviceStrategy: not data-parallel, so nothing is measured; it must train and say so once.
OTHER_STRATEGY = """
import numpy as np, tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
history = model.fit(np.ones((64, 4), "float32"), np.zeros((64, 2), "float32"), batch_size=16, verbose=0)
print("TRAINED", len(history.history["loss"]))
"""


@pytest.mark.parametrize("mode", ["fit", "loop", "loop-worker"])
def test_the_waiting_replica_shows_the_stall_and_the_slow_one_the_compute(recorded: dict[str, Trained],
                                                                        mode: str) -> None:
    run = recorded[mode]
    assert sorted(run.steps) == [0, 1] and all(len(run.steps[r]) >= STEPS - 5 for r in (0, 1)), run.steps.keys()
    stall_0, stall_1 = run.median(0, "comm_exposed_s"), run.median(1, "comm_exposed_s")
    assert abs(stall_0 - SLOW_S) <= 0.10 * SLOW_S, f"{mode}: replica 0 stall {stall_0 * 1e3:.1f} ms"
    assert stall_1 < 0.015, f"{mode}: replica 1 stall {stall_1 * 1e3:.1f} ms"
    compute_gap = run.median(1, "compute_s") - run.median(0, "compute_s")
    assert abs(compute_gap - SLOW_S) <= 0.10 * SLOW_S, f"{mode}: compute difference {compute_gap * 1e3:.1f} ms"
    assert run.median(0, "comm_s") == stall_0  # a packed all-reduce after the backward pass: all of it exposed
    assert max(run.unknown_share(0), run.unknown_share(1)) < 0.10


@pytest.mark.parametrize("mode", ["fit", "loop", "loop-worker"])
def test_data_wait_agrees_with_what_the_script_saw(recorded: dict[str, Trained], mode: str) -> None:
    run = recorded[mode]
    # the distributed iterator keeps a batch per replica in flight: a 40 ms batch under a ~65 ms step is hidden
    seen_by_script = run.printed("NEXT_MS") / 1e3 if mode != "fit" else 0.0
    for rank in (0, 1):
        ours = run.median(rank, "data_wait_s")
        assert abs(ours - seen_by_script) <= 0.005, f"{mode} rank {rank}: {ours * 1e3:.2f} ms vs {seen_by_script}"
    step_script = run.printed("STEP_MS") / 1e3
    step_ours = statistics.median(s["step_s"] for s in run.steps[0])  # type: ignore[type-var]
    assert abs(step_ours - step_script) <= 0.10 * step_script


@pytest.mark.parametrize("mode", ["fit", "loop", "loop-worker"])
def test_the_report_names_replica_1_as_the_straggler_with_cause_compute(recorded: dict[str, Trained],
                                                                       mode: str) -> None:
    run = recorded[mode]
    report = build_report(load(run.session).for_run(run.run_id))
    straggler = report.analysis.straggler
    assert straggler is not None, f"{mode}: no straggler named"
    assert (straggler.rank, straggler.cause) == (1, "compute")
    assert abs(straggler.gap_s - SLOW_S) <= 0.10 * SLOW_S


def test_several_steps_per_call_give_one_record_per_call_with_their_summed_figures(
        recorded: dict[str, Trained]) -> None:
    """A step function that runs k steps (a ``tf.range`` loop; ``steps_per_execution`` in ``fit``) gets one record
    per call, whose figures are the sums of its k steps, as the README says."""
    run = recorded["loop-multi"]
    for rank in (0, 1):
        assert len(run.steps[rank]) == STEPS // PER_CALL - 1, run.steps[rank]  # the first call is a first batch
    expected = PER_CALL * SLOW_S
    stall_0 = run.median(0, "comm_exposed_s")
    assert abs(stall_0 - expected) <= 0.10 * expected, f"stall {stall_0 * 1e3:.1f} ms for {PER_CALL} steps"
    compute_gap = run.median(1, "compute_s") - run.median(0, "compute_s")
    assert abs(compute_gap - expected) <= 0.10 * expected, f"compute gap {compute_gap * 1e3:.1f} ms"
    step_script = run.printed("STEP_MS") / 1e3
    step_ours = statistics.median(s["step_s"] for s in run.steps[0])  # type: ignore[type-var]
    assert abs(step_ours - step_script) <= 0.10 * step_script
    assert max(run.unknown_share(0), run.unknown_share(1)) == 0.0


def test_a_training_under_another_strategy_trains_and_says_once_what_is_not_measured(
        recorded: dict[str, Trained]) -> None:
    run = recorded["other"]
    assert "TRAINED 1" in run.outputs[0]
    lines = [line for line in run.errors[0].splitlines() if line.startswith("ringscope:")]
    assert lines == ["ringscope: this TensorFlow training not measured in this process (its strategy is "
                     "OneDeviceStrategy; Ringscope measures MirroredStrategy and MultiWorkerMirroredStrategy); the "
                     "program runs unchanged"]
    assert run.steps == {}  # nothing reported as measured
