"""The sweep's progress lines: written by ``ringscope sweep``, read back by the window."""

from __future__ import annotations

import pytest

from ringscope.gui.core.sweep.plan import Configuration
from ringscope.gui.core.sweep.progress_lines import ProgressLines, SweepProgress, format_progress, parse_progress
from ringscope.gui.core.sweep.runner import RunOutcome


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
