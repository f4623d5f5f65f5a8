"""The window's side of a sweep without a display: the form's checks, the command it runs, the progress lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gui.commands import sweep as sweep_command
from gui.core.sweep.plan import Configuration
from gui.core.sweep.progress import (
    SESSION_NAME,
    ProgressLines,
    SweepProgress,
    SweepRequest,
    format_progress,
    parse_progress,
    request_errors,
    sweep_argv,
    sweep_env,
)
from gui.core.sweep.runner import RunOutcome


def errors_of(request: SweepRequest, cpus: int = 2) -> list[str]:
    return request_errors(request, cpu_count=cpus, gpu_count=0)


def test_a_progress_line_reads_back_as_written() -> None:
    line = format_progress(3, 6, Configuration("tf-mirrored", 2), "started")
    assert line == "SWEEP config 3 of 6: tf-mirrored:2 started"
    assert parse_progress(f"  {line}\n") == SweepProgress(3, 6, "tf-mirrored", 2, "started")
    assert parse_progress(line).text() == "config 3 of 6: tf-mirrored, 2 ranks"  # type: ignore[union-attr]

    failed = format_progress(1, 1, Configuration("ddp", 1), "failed", "torchrun failed\nwith exit code 1")
    progress = parse_progress(failed)
    assert progress is not None and progress.finished
    assert (progress.event, progress.detail) == ("failed", "torchrun failed with exit code 1")  # one line, always
    assert progress.text() == "config 1 of 1: ddp, 1 rank — failed"


@pytest.mark.parametrize("line", ["ringscope sweep: [1/2] ddp:1: starting", "SWEEP config x of 2: ddp:1 started",
                                  "SWEEP config 1 of 2: ddp:1 exploded", ""])
def test_other_lines_are_not_progress(line: str) -> None:
    assert parse_progress(line) is None


def test_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="exploded"):
        format_progress(1, 1, Configuration("ddp", 1), "exploded")


def test_runner_callbacks_become_one_start_and_one_end_line_per_configuration() -> None:
    configurations = [Configuration("ddp", 1), Configuration("ddp", 2)]
    emitted: list[str] = []
    lines = ProgressLines(configurations, emitted.append)
    # the runner's order: progress (start), outcome, progress (end), for each configuration
    lines.on_progress("[1/2] ddp:1: starting")
    lines.on_outcome(RunOutcome(configurations[0], "r1", True, (0,), 1.0))
    lines.on_progress("[1/2] ddp:1: done in 1.0 s")
    lines.on_progress("[2/2] ddp:2: starting")
    lines.on_outcome(RunOutcome(configurations[1], "r2", False, (None,), 1.0, message="stopped before it finished",
                                interrupted=True))
    lines.on_progress("[2/2] ddp:2: stopped before it finished")
    assert [(p.number, p.ranks, p.event) for p in map(parse_progress, emitted) if p is not None] == [
        (1, 1, "started"), (1, 1, "done"), (2, 2, "started"), (2, 2, "stopped")]
    assert len(emitted) == 4


def test_a_valid_request_has_no_errors_and_its_command_is_the_cli(tmp_path: Path) -> None:
    request = SweepRequest(frameworks=("ddp",), ranks="1, 2", out=str(tmp_path / "new" / "sweep"), steps=30,
                           model_width=16, batch_size=8, dataset="synthetic", device="cpu")
    assert errors_of(request) == []
    assert request.configuration_count() == 2
    argv = sweep_argv(request)
    assert argv[:4] == [sys.executable, "-m", "gui.cli", "sweep"]
    parsed = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert parsed == {"--frameworks": "ddp", "--ranks": "1,2", "--steps": "30", "--model-width": "16",
                      "--batch-size": "8", "--dataset": "synthetic", "--device": "cpu",
                      "--out": str(tmp_path / "new" / "sweep")}
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


def test_names_agree_with_the_command() -> None:
    assert SESSION_NAME == sweep_command.SESSION_NAME
    assert "sweep.html" in sweep_command.OUTPUT_NAMES
