"""Runtime control of a real zero-code DDP run (``ringscope run`` + torchrun, 2 gloo ranks on CPU) through a real
collector: light timing switched to full while it trains, the refusal of the way back, both recorded as events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringscope.agent.schema import EventKind
from ringscope.gui.core.ingest.ask import ask
from ringscope.gui.core.ingest.collector import Collector
from tests.sinks import KeepingSink

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "plain_ddp.py"

pytestmark = pytest.mark.slow


def _stop(training: subprocess.Popen[str]) -> None:
    """``ringscope run`` stops the whole training on SIGTERM; kill it if it does not within 30 s."""
    training.terminate()
    try:
        training.wait(30)
    except subprocess.TimeoutExpired:
        training.kill()


def _wait(condition, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ddp_run() -> Iterator[tuple[Collector, KeepingSink]]:
    """One zero-code DDP run (2 gloo ranks, ~20 ms steps) for the module's tests, in file order."""
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink]).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("RINGSCOPE_DDP_TIMING", None)
    training = subprocess.Popen(
        [sys.executable, "-m", "ringscope.gui.cli", "run", "--endpoint", collector.endpoint, "--run-id", "control-run",
         "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
         "--steps", "100000", "--data-delay-ms", "20"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait(lambda: {s.rank for s in sink.steps()} == {0, 1}, 120)
        yield collector, sink
    finally:
        _stop(training)
        collector.close()


def test_ddp_timing_goes_from_light_to_full_while_the_run_trains(ddp_run: tuple[Collector, KeepingSink]) -> None:
    collector, sink = ddp_run
    assert all(s.bucket_count is None for s in sink.steps())  # light timing on CPU/gloo: no comm hook
    result = ask(collector.endpoint, "set", run_id="control-run", settings={"timing": "full"})
    assert sorted(r["rank"] for r in result["ranks"] if r.get("applied") == {"timing": "full"}) == [0, 1], result
    switched = len(sink.steps())
    _wait(lambda: {s.rank for s in sink.steps()[switched:] if s.bucket_count} == {0, 1}, 60)
    back = ask(collector.endpoint, "set", run_id="control-run", settings={"timing": "light"})
    assert all("restart" in r["refused"]["timing"] for r in back["ranks"]), back
    _wait(lambda: len(sink.events(EventKind.CONTROL)) >= 4, 10)
    warnings = [e.text or "" for e in sink.events(EventKind.WARNING)]
    assert sum("switched to full" in w for w in warnings) == 2, warnings


def test_ringscope_profile_hands_back_one_trace_with_both_ranks_operators(
        ddp_run: tuple[Collector, KeepingSink], tmp_path: Path) -> None:
    collector, sink = ddp_run
    out = tmp_path / "profile"
    done = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "profile", "--endpoint", collector.endpoint,
                           "--run", "control-run", "--steps", "5", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    trace = json.loads((out / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {n.split(" (")[0] for n in names} == {"rank 0", "rank 1"}
    for rank in (0, 1):
        ops = {e["name"] for e in trace["traceEvents"] if e.get("pid") == rank and e.get("ph") == "X"}
        assert any(name.startswith("aten::") for name in ops), sorted(ops)[:20]
    # the ranks' events overlap in time on the merged clock (they ran the same steps together)
    spans = {rank: [e["ts"] for e in trace["traceEvents"] if e.get("pid") == rank and e.get("ph") == "X"]
             for rank in (0, 1)}
    assert max(min(v) for v in spans.values()) < min(max(v) for v in spans.values())
    assert "rank 0: top operators" in done.stdout and "aten::" in done.stdout
    assert len(list((out / "ranks").iterdir())) == 2
    _wait(lambda: len(sink.events(EventKind.PROFILE)) >= 2, 10)  # the answers are recorded


def test_a_tensorflow_profile_on_demand_is_kept_in_tensorboards_layout(tmp_path: Path) -> None:
    """A custom loop under MirroredStrategy (2 CPU replicas, zero-code): TensorFlow's profiler for 3 steps."""
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink]).start()
    script = ROOT / "tests" / "integration" / "scripts" / "tf_straggler.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    training = subprocess.Popen(
        [sys.executable, "-m", "ringscope.gui.cli", "run", "--endpoint", collector.endpoint, "--run-id", "tf-profile",
         "--", sys.executable, str(script), "loop", "--steps", "100000", "--slow-ms", "5", "--batch-ms", "5"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(lambda: len(sink.steps()) >= 10, 180)
        result = ask(collector.endpoint, "profile", run_id="tf-profile", steps=3, wait_s=60.0)
    finally:
        _stop(training)
        collector.close()
    [answer] = result["ranks"][:1]
    assert answer["answered"] and answer["format"] == "tensorboard", answer
    assert any(name.startswith("plugins/profile/") and name.endswith(".xplane.pb") for name in answer["files"]), answer
    from ringscope.gui.core.report.profiles import merge

    summary = merge(result, tmp_path / "out")
    assert summary.tensorboard and list(summary.tensorboard[0].rglob("*.xplane.pb"))
