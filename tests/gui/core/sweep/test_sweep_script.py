"""Sweeping the user's own script (``--script``): the refusals before anything runs, the zero-code launch of each
configuration, steps/s when the script's steps carry no sample count, and outputs that say the footing was not
checked. Fast and in-process; the real run is ``tests/integration/test_sweep.py``."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from ringscope.gui.cli import main
from ringscope.gui.core.sweep import NOT_CHECKED, SweepPlan, SweepReport, csv_text, render_html
from ringscope.gui.core.sweep.advice import recommend
from ringscope.gui.core.sweep.analysis import SweepRow, check_footing, measure, with_efficiency
from ringscope.gui.core.sweep.plan import Configuration, problems, process_plans, script_conflicts
from ringscope.gui.core.sweep.runner import RunOutcome
from tests.gui.core.analysis.test_analysis import make_session

ENDPOINT = "tcp://127.0.0.1:5999"


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('training')\n")
    return str(path)


def _plan(script: str, frameworks: tuple[str, ...] = ("ddp",), **changes: object) -> SweepPlan:
    changes = {"device": "cpu", **changes}
    return SweepPlan(frameworks, (1, 2), script=script, script_args=("--epochs", "1"), **changes)  # type: ignore[arg-type]


# ---- Refusals ------------------------------------------------------------------------------------------------------


def test_a_script_sweep_this_machine_can_run_has_no_problems(script: str) -> None:
    assert problems(_plan(script), cpu_count=2, gpu_count=0) == []
    assert problems(_plan(script, ("tf-multi-worker",)), cpu_count=2, gpu_count=0) == []
    assert problems(_plan(script, ("tf-mirrored",), device="gpu"), cpu_count=2, gpu_count=2) == []


def test_a_missing_script_or_a_folder_is_refused(tmp_path: Path) -> None:
    (missing,) = problems(_plan(str(tmp_path / "nope.py")), cpu_count=2, gpu_count=0)
    assert missing == (f"--script {str(tmp_path / 'nope.py')!r} does not exist; give the path of your training "
                       "script (a .py file)")
    (folder,) = problems(_plan(str(tmp_path)), cpu_count=2, gpu_count=0)
    assert folder.endswith("is a folder; give the path of your training script (a .py file)")


def test_a_script_is_one_framework_and_tf_mirrored_needs_gpus(script: str) -> None:
    (two,) = problems(_plan(script, ("ddp", "tf-multi-worker")), cpu_count=2, gpu_count=0)
    assert two == ("--script with --frameworks ddp,tf-multi-worker: a script is written for one framework; sweep it "
                   "with that one (e.g. --frameworks ddp)")
    (mirrored,) = problems(_plan(script, ("tf-mirrored",)), cpu_count=2, gpu_count=0)
    assert mirrored.startswith("--script with tf-mirrored on the CPU: a MirroredStrategy script's replica count "
                               "cannot be set from outside")
    assert "tf-multi-worker" in mirrored and "--device gpu" in mirrored


def test_more_ranks_than_the_host_can_place_is_refused_for_a_script_too(script: str) -> None:
    (cpu,) = problems(_plan(script), cpu_count=1, gpu_count=0)
    assert cpu.startswith("--ranks 1,2: a CPU run of 2 ranks needs 2 cores (one per rank) and this machine has 1")


def test_the_reference_trainers_options_and_delays_are_refused_with_a_script(script: str) -> None:
    assert script_conflicts([]) == []
    (both,) = script_conflicts(["--model-width", "--dataset"])
    assert both.startswith("--model-width, --dataset with --script: these configure the reference trainers only")
    (delay,) = problems(_plan(script, comm_delays={"ddp:2": 40.0}), cpu_count=2, gpu_count=0)
    assert delay.startswith("--comm-delay-ms-for with --script: the injected all-reduce delay is a hook of the "
                            "reference DDP trainer")


def test_the_command_refuses_before_anything_is_written(script: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    base = ["sweep", "--device", "cpu", "--ranks", "1", "--out", str(out)]
    cases = [
        (["--frameworks", "ddp", "--script", script, "--model-width", "128", "--model-depth", "3"],
         "--model-width, --model-depth with --script: these configure the reference trainers only"),
        (["--frameworks", "ddp", "--script", script, "--dataset", "synthetic"],
         "--dataset with --script: it configures the reference trainers only"),
        (["--frameworks", "ddp", "--script", script, "--steps", "50"], "--steps with --script"),
        (["--frameworks", "ddp,tf-multi-worker", "--script", script], "a script is written for one framework"),
        (["--frameworks", "ddp", "--script", str(tmp_path / "missing.py")], "does not exist"),
        (["--frameworks", "ddp", "--script-args", "--epochs 1"], "--script-args without --script"),
        (["--frameworks", "ddp", "--script", script, "--script-args", "'unclosed"], "check its quotes"),
    ]
    for args, words in cases:
        assert main([*base, *args]) == 2, args
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
        assert not out.exists()


# ---- The launch of each configuration ------------------------------------------------------------------------------


def test_each_configuration_runs_the_script_through_the_zero_code_path(script: str) -> None:
    (torchrun,) = process_plans(_plan(script), Configuration("ddp", 2), "run-2", ENDPOINT)
    assert torchrun.argv == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             script, "--epochs", "1"]
    # the injection of ringscope run: its bootstrap first on PYTHONPATH, this run's id and the collector
    bootstrap = torchrun.env["PYTHONPATH"].split(":")[0]
    assert (Path(bootstrap) / "sitecustomize.py").is_file()
    assert torchrun.env["RINGSCOPE_RUN_ID"] == "run-2" and torchrun.env["RINGSCOPE_ENDPOINT"] == ENDPOINT
    workers = process_plans(_plan(script, ("tf-multi-worker",)), Configuration("tf-multi-worker", 2), "r", ENDPOINT)
    assert [p.argv[1:] for p in workers] == [[script, "--epochs", "1"]] * 2
    assert [json.loads(p.env["TF_CONFIG"])["task"] for p in workers] == [{"type": "worker", "index": 0},
                                                                         {"type": "worker", "index": 1}]
    (mirrored,) = process_plans(_plan(script, ("tf-mirrored",), device="gpu"), Configuration("tf-mirrored", 3), "r",
                                ENDPOINT)
    assert mirrored.argv[1:] == [script, "--epochs", "1"] and mirrored.env["CUDA_VISIBLE_DEVICES"] == "0,1,2"


# ---- Figures and outputs -------------------------------------------------------------------------------------------


def _outcome(ranks: int, run_id: str) -> RunOutcome:
    return RunOutcome(Configuration("ddp", ranks), run_id, True, (0,), 5.0)


def test_a_script_row_takes_its_global_batch_from_the_recorded_samples(script: str) -> None:
    session = make_session(ranks=2, steps=60, gpu=False)
    (run_id,) = session.run_ids
    row = measure(session, _outcome(2, run_id), _plan(script))
    assert row.status == "ok" and row.throughput_unit == "samples/s"
    assert row.global_batch == 2 * int(session.steps["samples"][0])
    wrong = measure(session, _outcome(1, run_id), _plan(script))
    assert wrong.status == "the script ran 2 rank(s), not 1: left out of the comparison" and not wrong.measured


def test_without_sample_counts_throughput_and_efficiency_are_in_steps_per_second(script: str) -> None:
    session = make_session(ranks=2, steps=60, gpu=False)
    session.steps["samples"][:] = float("nan")
    (run_id,) = session.run_ids
    row = measure(session, _outcome(2, run_id), _plan(script))
    assert row.samples_per_s is None and row.steps_per_s and row.throughput_unit == "steps/s"
    assert row.global_batch is None and row.cost_per_1000_samples is None and row.status == "ok"
    rows = with_efficiency([SweepRow("ddp", 1, "a", None, steps_per_s=100.0), SweepRow("ddp", 2, "b", None,
                                                                                       steps_per_s=150.0)])
    assert [r.efficiency for r in rows] == [1.0, 0.75]
    assert "(150 steps/s)" in recommend(rows).headline


def test_the_outputs_say_the_footing_was_not_checked(script: str) -> None:
    plan = _plan(script)
    footing = check_footing([_outcome(1, "a"), _outcome(2, "b")], plan)
    assert not footing.checked and not footing.equal and footing.csv_value == NOT_CHECKED
    assert footing.text.startswith("Footing not checked: user script (same script and arguments for every "
                                   f"configuration): every configuration ran {script} --epochs 1 unmodified")
    rows = with_efficiency([SweepRow("ddp", 1, "a", None, steps=60, steps_per_s=100.0),
                            SweepRow("ddp", 2, "b", None, steps=60, steps_per_s=150.0)])
    report = SweepReport(plan, (), tuple(rows), recommend(rows), footing, "out/sweep.db", 9.0, 1_700_000_000.0)
    lines = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert {line["equal_footing"] for line in lines} == {NOT_CHECKED}
    assert [line["throughput_unit"] for line in lines] == ["steps/s", "steps/s"]
    assert [line["steps_per_s"] for line in lines] == ["100", "150"] and lines[1]["efficiency"] == "0.75"
    assert lines[0]["script"] == f"{script} --epochs 1" and lines[0]["model_width"] == lines[0]["dataset"] == ""
    page = render_html(report)
    assert "Footing not checked: user script" in page and "class='unchecked'" in page
    assert "Steps/s of all ranks" in page and f"user script {script} --epochs 1 (zero-code)" in page
