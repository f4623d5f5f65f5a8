"""Zero-code PyTorch (``ringscope.agent.inject.torch_patch``) in real processes started with the injection environment.

Each scenario of ``inject_scenarios.py`` runs in a fresh process (zero-code attaches to the first DDP model of a
process) with one gloo rank and an uninstrumented twin model as the reference; the four run concurrently. What
they cover: a comm hook registered after construction is wrapped and timed, a second one is refused exactly as DDP
refuses it, an internal failure falls back to the plain hook without changing a weight, where steps end without an
optimizer step, a forced failure at attach, and ``instrument()`` on an attached model (measured once).
Multi-rank accuracy under torchrun is tested in tests/integration/test_run_command.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringscope.agent.inject import injection_env

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "inject_scenarios.py"
ROOT = Path(__file__).resolve().parents[2]
OFF_LINE = "ringscope: zero-code instrumentation is off in this process"


@pytest.fixture(scope="module")
def scenarios() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Every scenario's JSON result and the injection's stderr lines, run concurrently."""
    names = {"user_hook": {}, "boundaries": {}, "fault_attach": {"RINGSCOPE_INJECT_FAULT": "attach"},
             "hand_over": {}}
    processes = {}
    for name, extra in names.items():
        env = dict(os.environ, OMP_NUM_THREADS="1", RINGSCOPE_ENDPOINT="tcp://127.0.0.1:1", **extra)
        env.update(injection_env(env))
        processes[name] = subprocess.Popen([sys.executable, str(SCRIPT), name], cwd=ROOT, env=env, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    results = {}
    for name, process in processes.items():
        try:
            stdout, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate(timeout=10)
        assert process.returncode == 0, f"{name} failed:\n{stderr[-3000:]}"
        (line,) = [line for line in stdout.splitlines() if line.startswith("SCENARIO ")]
        results[name] = (json.loads(line[len("SCENARIO "):]), [e for e in stderr.splitlines() if OFF_LINE in e])
    return results


def test_a_hook_registered_later_is_wrapped_never_refused_and_a_failure_falls_back(scenarios: Any) -> None:
    result, off_lines = scenarios["user_hook"]
    assert result["hook_names"] == ["fp16_compress_hook", "fp16_compress_hook"], "DDP's logging names the user's"
    assert [s["buckets"] for s in result["steps"]] == [1, 1, 1], "the user's hook was timed, one bucket per step"
    assert all(s["comm_s"] is not None for s in result["steps"])
    assert result["equal_before"], "the wrapped fp16 hook must give the bare hook's weights"
    # a second registration: the very error DDP gives without Ringscope
    assert len(result["errors"]) == 2 and result["errors"][0] == result["errors"][1]
    assert "only be called once" in result["errors"][0]
    # the timing failed mid-training: plain fp16 from then on, same weights, one line, no more steps
    assert result["equal_after"]
    assert len(off_lines) == 1 and "simulated failure inside the timing hook" in off_lines[0]


def test_steps_end_at_the_next_batch_or_forward_without_an_optimizer_step(scenarios: Any) -> None:
    result, off_lines = scenarios["boundaries"]
    assert off_lines == []
    # 4 loader batches with manual updates, 3 list batches with manual updates (the last ended by the next
    # phase's batch request), 3 iterations stepping two optimizers each: one step per iteration, 10 in all
    assert result["counts"] == [4, 6, 10, 10]
    steps = result["steps"]
    assert [s["step"] for s in steps] == list(range(10))
    assert [s["samples"] for s in steps] == [4] * 5 + [None] * 2 + [4] * 3  # list batches: no DataLoader
    assert [s["first"] for s in steps] == [True] + [False] * 6 + [True, False, False]
    assert all(s["buckets"] is None for s in steps)  # light timing (CPU default): DDP's own all-reduce, no count


def test_a_failure_at_attach_leaves_the_model_uninstrumented_and_unchanged(scenarios: Any) -> None:
    result, off_lines = scenarios["fault_attach"]
    assert result == {"attached": False, "hooks": 0, "equal": True}
    assert len(off_lines) == 1 and "RINGSCOPE_INJECT_FAULT=attach" in off_lines[0]


def test_instrument_on_an_attached_model_returns_its_probe_and_measures_once(scenarios: Any) -> None:
    result, off_lines = scenarios["hand_over"]
    assert result["same_probe"] and result["equal"] and off_lines == []
    assert [s["step"] for s in result["steps"]] == [0, 1, 2], "the script's step_done marks the steps, once each"
    assert all(s["buckets"] == 1 and s["samples"] == 4 for s in result["steps"])
