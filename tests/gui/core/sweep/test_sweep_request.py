"""The window's side of a sweep without a display: the form's request, its checks and the command it runs."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ringscope.gui.commands import sweep as sweep_command
from ringscope.gui.core.sweep.plan import REFERENCE_ONLY_OPTIONS, SESSION_NAME, script_conflicts
from ringscope.gui.core.sweep.request import (
    SweepRequest,
    parse_comm_delays,
    request_errors,
    script_path,
    split_script_args,
    sweep_argv,
    sweep_env,
)


def errors_of(request: SweepRequest, cpus: int = 2) -> list[str]:
    return request_errors(request, cpu_count=cpus, gpu_count=0)


def test_a_valid_request_has_no_errors_and_its_command_is_the_cli(tmp_path: Path) -> None:
    request = SweepRequest(frameworks=("ddp",), ranks="1, 2", out=str(tmp_path / "new" / "sweep"), steps=30,
                           model_width=16, batch_size=8, dataset="synthetic", device="cpu")
    assert errors_of(request) == []
    assert request.configuration_count() == 2
    argv = sweep_argv(request)
    assert argv[:4] == [sys.executable, "-m", "ringscope.gui.cli", "sweep"]
    parsed = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert parsed == {"--frameworks": "ddp", "--ranks": "1,2", "--steps": "30", "--model-width": "16",
                      "--model-depth": "2", "--batch-size": "8", "--dataset": "synthetic", "--device": "cpu",
                      "--timeout-per-run": "900", "--out": str(tmp_path / "new" / "sweep")}
    # the CLI itself accepts it: its own parser and --help run from any folder with the window's environment
    check = subprocess.run([*argv[:4], "--help"], cwd=tmp_path, env={**os.environ, **sweep_env()},
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0 and "--frameworks" in check.stdout, check.stderr


def test_the_cli_checks_refuse_what_the_cli_refuses(tmp_path: Path) -> None:
    base = SweepRequest(frameworks=("ddp",), ranks="1,2", out=str(tmp_path / "out"))
    assert "has no 1" in " ".join(errors_of(SweepRequest(("ddp",), "2", str(tmp_path / "out"))))
    assert "needs 3 cores" in " ".join(errors_of(SweepRequest(("ddp",), "1,3", str(tmp_path / "out")), cpus=2))
    assert "ranks: " in " ".join(errors_of(SweepRequest(("ddp",), "1,two", str(tmp_path / "out"))))
    assert "no framework chosen" in " ".join(errors_of(SweepRequest((), "1", str(tmp_path / "out"))))
    assert "no output folder" in " ".join(errors_of(SweepRequest(("ddp",), "1", " ")))
    (tmp_path / "file").write_text("x")
    assert "is a file" in " ".join(errors_of(SweepRequest(("ddp",), "1", str(tmp_path / "file"))))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / SESSION_NAME).write_bytes(b"")
    assert "already exists" in " ".join(errors_of(base))


def test_the_request_defaults_are_the_cli_defaults() -> None:
    from ringscope.gui.cli import build_parser

    cli = build_parser().parse_args(["sweep", "--frameworks", "ddp", "--ranks", "1", "--out", "x"])
    request = SweepRequest(("ddp",), "1", "x")
    assert (request.steps, request.model_width, request.model_depth, request.batch_size, request.dataset,
            request.device, request.price_per_gpu_hour, request.timeout_per_run_s, request.comm_delays,
            request.script, split_script_args(request.script_args)) == (
        cli.steps, cli.model_width, cli.model_depth, cli.batch_size, cli.dataset, cli.device, cli.price_per_gpu_hour,
        cli.timeout_per_run, dict(cli.comm_delay_ms_for), cli.script, cli.script_args)


# ---- The command with every option, and with a user script ----------------------------------------------------


def _parsed(argv: list[str]) -> argparse.Namespace:
    """``argv`` (a ``sweep_argv``) parsed by the real ``ringscope`` parser."""
    from ringscope.gui.cli import build_parser

    assert argv[:4] == [sys.executable, "-m", "ringscope.gui.cli", "sweep"]
    return build_parser().parse_args(argv[3:])


def test_every_option_reaches_the_command_as_its_flag(tmp_path: Path) -> None:
    request = SweepRequest(("ddp",), "1,2", str(tmp_path / "out"), model_depth=5, price_per_gpu_hour=12345.67,
                           timeout_per_run_s=120, comm_delays={"ddp:2": 40.5, "ddp:1": 0.0})
    args = _parsed(sweep_argv(request))
    assert (args.model_depth, args.price_per_gpu_hour, args.timeout_per_run) == (5, 12345.67, 120.0)  # not rounded
    assert args.comm_delay_ms_for == [("ddp:2", 40.5), ("ddp:1", 0.0)]  # in the order typed
    assert "--price-per-gpu-hour" not in sweep_argv(replace(request, price_per_gpu_hour=None))  # the agents' price


def test_a_script_sweep_passes_the_script_and_none_of_the_reference_trainers_options(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    request = SweepRequest(("ddp",), "1,2", str(tmp_path / "out"), steps=30, model_width=16, model_depth=3,
                           batch_size=8, dataset="synthetic", comm_delays={"ddp:2": 40.0}, script=str(script),
                           script_args=" --epochs 1 --name 'two words' ", price_per_gpu_hour=2.5)
    argv = sweep_argv(request)
    assert not {*REFERENCE_ONLY_OPTIONS, "--comm-delay-ms-for"} & set(argv)
    assert argv[argv.index("--script") + 1] == str(script)
    assert "--script-args=--epochs 1 --name 'two words'" in argv  # one word, although it starts with "--"
    args = _parsed(argv)
    assert (args.script, args.script_args, args.price_per_gpu_hour) == (
        str(script), ("--epochs", "1", "--name", "two words"), 2.5)
    assert script_conflicts(getattr(args, sweep_command.GIVEN, [])) == []  # what the CLI refuses with --script
    assert errors_of(request) == []  # the fields that do not apply are not checked either
    assert errors_of(replace(request, steps=0, comm_delays={"ddp:9": 1.0})) == []

    assert _parsed(sweep_argv(replace(request, script_args="--fast"))).script_args == ("--fast",)
    assert not any(word.startswith("--script-args") for word in sweep_argv(replace(request, script_args="  ")))
    reference = sweep_argv(replace(request, script=None, script_args=""))
    assert set(REFERENCE_ONLY_OPTIONS) <= set(reference) and "--comm-delay-ms-for" in reference
    assert "--script" not in reference


def test_a_script_path_is_made_absolute_as_the_cli_makes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert script_path(" train.py ") == str(tmp_path / "train.py")
    assert script_path("~/train.py") == str(tmp_path / "home" / "train.py")
    argv = sweep_argv(SweepRequest(("ddp",), "1", "out", script="train.py"))
    assert argv[argv.index("--script") + 1] == str(tmp_path / "train.py")


def test_a_script_sweep_is_refused_as_the_cli_refuses_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    base = SweepRequest(("ddp",), "1,2", str(tmp_path / "out"), script=str(script), device="cpu")
    missing = str(tmp_path / "nowhere.py")
    assert errors_of(replace(base, script=missing)) == [
        f"--script {missing!r} does not exist; give the path of your training script (a .py file)"]
    assert "no training script chosen" in " ".join(errors_of(replace(base, script=" ")))
    assert "script arguments: cannot split" in " ".join(errors_of(replace(base, script_args="--name 'open")))
    assert "a script is written for one framework" in " ".join(
        errors_of(replace(base, frameworks=("ddp", "tf-multi-worker"))))
    assert "--script with tf-mirrored on the CPU" in " ".join(errors_of(replace(base, frameworks=("tf-mirrored",))))
    assert errors_of(base) == []


def test_typed_delays_parse_in_order_with_a_message_for_each_bad_one() -> None:
    assert parse_comm_delays("ddp:2=40.5,  ddp:1=0 ") == ({"ddp:2": 40.5, "ddp:1": 0.0}, [])
    assert parse_comm_delays("") == ({}, [])
    delays, errors = parse_comm_delays("ddp:2=fast ddp:4=40")
    assert delays == {"ddp:4": 40.0}
    assert len(errors) == 1 and errors[0].startswith("all-reduce delay: expected FRAMEWORK:RANKS=MS")
    assert "'ddp:2=fast'" in errors[0]
