"""The DDP reference trainer under real torchrun (2 gloo ranks), its telemetry received on a real ROUTER socket.

Each torchrun run is a module-scoped fixture shared by several tests (a run costs ~10 s on a 2-core box). The
injected delays (``--slow-rank/--slow-ms``, ``--data-delay-ms``) are the known truths the measurements must find;
tolerances are wide enough for a loaded machine and narrow enough to catch a wrong definition.
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
from typing import TYPE_CHECKING, Any

import pytest

from ringscope.agent.schema import EventKind, Step
from ringscope.trainers.common import parse_result
from tests.ports import free_port

if TYPE_CHECKING:
    from tests.trainers.conftest import TelemetryReceiver

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 150
# The default model: 64 inputs -> 64 -> 64 -> 10 classes (weights + biases), one fp32 gradient bucket.
DIGITS_MLP_PARAMETERS = (64 * 64 + 64) + (64 * 64 + 64) + (64 * 10 + 10)


@dataclass
class Run:
    """One finished torchrun: exit code, output, parsed result line, and the telemetry received."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    receiver: TelemetryReceiver | None

    @property
    def result(self) -> dict[str, Any]:
        return parse_result(self.stdout)

    def steady(self, rank: int) -> list[Step]:
        """Steps of ``rank`` without the first batch of each iterator (worker start-up)."""
        assert self.receiver is not None
        return [s for s in self.receiver.steps(rank) if not s.first_batch]


def torchrun(args: list[str], receiver: TelemetryReceiver | None, endpoint: str | None = None) -> Run:
    """Run the trainer on 2 ranks; telemetry goes to ``receiver`` (or ``endpoint``). Killed on timeout."""
    env = dict(os.environ, RINGSCOPE_RUN_ID="test-run", OMP_NUM_THREADS="1")
    env["RINGSCOPE_ENDPOINT"] = receiver.endpoint if receiver is not None else (endpoint or env["RINGSCOPE_ENDPOINT"])
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), "-m", "ringscope.trainers.ddp_trainer", "--log-every", "0", *args]
    started = time.monotonic()
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            stdout, stderr = proc.communicate(timeout=10)
    run = Run(proc.returncode, stdout, stderr, time.monotonic() - started, receiver)
    assert run.returncode == 0, f"trainer failed ({run.returncode}):\n{stderr[-3000:]}"
    if receiver is not None:  # the agents flush at close; give the last batch a moment to arrive
        receiver.wait_for(lambda r: len(r.events(EventKind.FINISHED)) >= 2, timeout_s=10)
    return run


def _median(steps: list[Step], field: str) -> float:
    values = [getattr(s, field) for s in steps if getattr(s, field) is not None]
    assert values, f"no {field} in {len(steps)} steps"
    return statistics.median(values)


# ---- Runs (shared) -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def slow_run(receiver_factory: Callable[[], TelemetryReceiver], checkpoint_dir: Path) -> Run:
    """Rank 1 does 150 ms more compute per step; checkpoints every 10 steps."""
    return torchrun(["--steps", "30", "--slow-rank", "1", "--slow-ms", "150", "--checkpoint-dir",
                     str(checkpoint_dir), "--checkpoint-every-steps", "10"], receiver_factory())


@pytest.fixture(scope="module")
def resumed_run(receiver_factory: Callable[[], TelemetryReceiver], checkpoint_dir: Path, slow_run: Run) -> Run:
    return torchrun(["--steps", "40", "--checkpoint-dir", str(checkpoint_dir), "--resume"], receiver_factory())


@pytest.fixture(scope="module", params=[0, 2], ids=["workers0", "workers2"])
def delay_run(request: pytest.FixtureRequest, receiver_factory: Callable[[], TelemetryReceiver]) -> tuple[int, Run]:
    """80 ms per batch inside the data set, with 0 or 2 loader workers."""
    workers = int(request.param)
    return workers, torchrun(["--steps", "30", "--data-delay-ms", "80", "--loader-workers", str(workers)],
                             receiver_factory())


@pytest.fixture(scope="module")
def fp16_runs(receiver_factory: Callable[[], TelemetryReceiver]) -> tuple[Run, Run]:
    """The fp16 compression hook wrapped by Ringscope, and registered bare (--no-agent)."""
    args = ["--steps", "66", "--compression", "fp16"]
    return torchrun(args, receiver_factory()), torchrun([*args, "--no-agent"], None)


@pytest.fixture(scope="module")
def comm_delay_run(receiver_factory: Callable[[], TelemetryReceiver]) -> Run:
    """Every all-reduce completes 60 ms late (--comm-delay-ms), on both ranks: a slow network."""
    return torchrun(["--steps", "20", "--comm-delay-ms", "60"], receiver_factory())


# ---- (a) straggler ------------------------------------------------------------------------------------------------


def test_slow_rank_has_the_smallest_stall_and_the_others_wait_for_it(slow_run: Run) -> None:
    fast, slow = _median(slow_run.steady(0), "comm_exposed_s"), _median(slow_run.steady(1), "comm_exposed_s")
    assert slow < fast
    assert abs((fast - slow) - 0.150) < 0.060, f"rank 0 stall {fast:.3f} s, rank 1 stall {slow:.3f} s"
    # the slow rank's extra time is compute, not communication
    assert _median(slow_run.steady(1), "compute_s") - _median(slow_run.steady(0), "compute_s") > 0.100


def test_phases_add_up_to_the_step(slow_run: Run) -> None:
    for rank in (0, 1):
        for step in slow_run.steady(rank):
            parts = (step.data_wait_s or 0) + (step.compute_s or 0) + (step.comm_exposed_s or 0)
            assert parts <= step.step_s * 1.02 + 1e-4
            assert step.step_s - parts < 0.010 + 0.05 * step.step_s, step
            assert step.bucket_count == 1 and step.bucket_bytes == 4 * DIGITS_MLP_PARAMETERS


def test_identity_comes_from_torchrun(slow_run: Run) -> None:
    assert slow_run.receiver is not None
    hellos = {h.rank: h for h in slow_run.receiver.hellos()}
    assert set(hellos) == {0, 1}
    for rank, hello in hellos.items():
        assert (hello.world_size, hello.ranks, hello.framework, hello.strategy) == (2, [rank], "pytorch", "ddp")
        assert hello.backend == "gloo" and hello.run_id == "test-run"
        assert hello.devices[0]["kind"] == "cpu"


# ---- (f) cross-check with DDP's own logging ----------------------------------------------------------------------


def test_stall_matches_ddp_logging_data(slow_run: Run) -> None:
    for rank_figures in slow_run.result["ranks"]:
        comm, overlap = rank_figures["ddp_avg_backward_comm_s"], rank_figures["ddp_avg_backward_overlap_s"]
        if comm is None:
            pytest.fail(f"DDP logging data has no avg_backward_comm_time on rank {rank_figures['rank']}")
        ddp_exposed = comm - (overlap or 0.0)
        ours = _median(slow_run.steady(rank_figures["rank"]), "comm_exposed_s")
        assert abs(ddp_exposed - ours) < max(0.030, 0.25 * ours), (rank_figures, ours)


# ---- (e) checkpoints and resume ----------------------------------------------------------------------------------


def test_checkpoints_are_reported_with_their_bytes(slow_run: Run, checkpoint_dir: Path) -> None:
    assert slow_run.receiver is not None
    saved = slow_run.receiver.events(EventKind.CHECKPOINT_SAVED)
    assert [e.step for e in saved] == [10, 20, 30]
    size = (checkpoint_dir / "checkpoint.pt").stat().st_size
    assert all(e.bytes == size and e.duration_s is not None and e.duration_s >= 0 for e in saved)


def test_resume_continues_the_step_count(resumed_run: Run) -> None:
    assert resumed_run.receiver is not None
    result = resumed_run.result
    assert (result["steps"], result["resumed_from_step"]) == (40, 30)
    for rank in (0, 1):
        numbers = sorted(s.step for s in resumed_run.receiver.steps(rank))
        assert numbers == list(range(30, 40))
    restored = resumed_run.receiver.events(EventKind.CHECKPOINT_RESTORED)
    assert sorted(e.rank for e in restored) == [0, 1]
    assert all(e.step == 30 and e.bytes and e.bytes > 0 for e in restored)


# ---- (b) data-loader wait ----------------------------------------------------------------------------------------


def test_data_wait_matches_the_injected_loader_latency(delay_run: tuple[int, Run]) -> None:
    """0 workers: every batch costs the loop 80 ms. 2 workers build two batches per 80 ms, so in steady state the
    loop gets one batch per 40 ms and waits 40 ms minus the rest of its step (the two workers run in lockstep, so
    single waits alternate between ~75 and ~0 ms: the mean is the figure to check there, not the median)."""
    workers, run = delay_run
    assert run.receiver is not None
    for rank in (0, 1):
        steps = run.steady(rank)[4:]  # past the batches prefetched during worker start-up
        waits = [s.data_wait_s or 0.0 for s in steps]
        if workers == 0:
            assert abs(statistics.median(waits) - 0.080) < 0.020, waits
        else:
            rest = statistics.mean(s.step_s - (s.data_wait_s or 0.0) for s in steps)
            assert abs(statistics.mean(waits) - (0.040 - rest)) < 0.015, (waits, rest)
            assert abs(statistics.mean(s.step_s for s in steps) - 0.040) < 0.015
        first = [s for s in run.receiver.steps(rank) if s.first_batch]
        assert first and all((s.data_wait_s or 0) >= 0.075 for s in first)


# ---- (c) compression hook wrapped --------------------------------------------------------------------------------


def test_fp16_hook_wrapped_trains_like_the_bare_hook(fp16_runs: tuple[Run, Run]) -> None:
    wrapped, bare = fp16_runs
    assert wrapped.result["final_loss"] == pytest.approx(bare.result["final_loss"], rel=1e-4, abs=1e-5)
    assert wrapped.result["accuracy"] > 0.85 and wrapped.result["final_loss"] < 0.8
    assert wrapped.receiver is not None
    steps = wrapped.receiver.steps(0)
    assert steps[0].loss is not None and steps[-1].loss is not None and steps[-1].loss < steps[0].loss


# ---- (h) injected all-reduce delay -------------------------------------------------------------------------------


def test_comm_delay_is_measured_as_allreduce_stall_on_every_rank(comm_delay_run: Run) -> None:
    for rank in (0, 1):
        steady = comm_delay_run.steady(rank)[3:]
        assert _median(steady, "comm_exposed_s") == pytest.approx(0.060, abs=0.015), rank
        assert _median(steady, "compute_s") < 0.030, rank  # the delay is on the communication path, not compute
    assert comm_delay_run.result["comm_delay_ms"] == 60
    assert comm_delay_run.result["footing"]["parameters"] == DIGITS_MLP_PARAMETERS


# ---- (d) no collector --------------------------------------------------------------------------------------------


def test_no_collector_listening_still_finishes() -> None:
    run = torchrun(["--steps", "20"], None, endpoint=f"tcp://127.0.0.1:{free_port()}")
    assert run.result["steps"] == 20
    assert run.seconds < 60


# ---- (g) bad options ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--slow-rank", "3", "--slow-ms", "10"], "--slow-rank 3 does not exist"),
        (["--amp", "--device", "cpu"], "--amp needs a GPU"),
        (["--resume"], "--resume needs --checkpoint-dir"),
        (["--comm-delay-ms", "-5"], "--comm-delay-ms must be 0 or a positive number of milliseconds, got -5.0"),
    ],
)
def test_bad_options_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ringscope.trainers.ddp_trainer", *args], cwd=ROOT,
                          capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, WORLD_SIZE="2"))
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr
