"""Comparison of two sessions: a run with a straggler (A) and the same run after the fix (B)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringscope.gui.core.analysis.compare import Comparison, compare
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.report import build_report
from tests.gui.core.analysis.test_analysis import make_session


def before_and_after() -> Comparison:
    """A run with a straggler (A) and the same run after the fix (B), priced at 2 per GPU-hour."""
    before = build_report(make_session(ranks=4, steps=120, straggler=1, extra_compute_s=0.040), 2.0)
    after = build_report(make_session(ranks=4, steps=120), 2.0)
    return compare(before, after, "before.db", "after.db")


def empty_and_after(folder: Path, comparison: Comparison) -> Comparison:
    """A session that recorded nothing (A) against ``comparison``'s B."""
    empty_file = folder / "empty.db"
    Recorder(empty_file).start().close()  # a collector that recorded nothing
    return compare(build_report(load(empty_file), 2.0), comparison.b, "empty.db", "after.db")


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return before_and_after()


def test_differences_have_direction_and_the_fixed_run_wins(comparison) -> None:  # type: ignore[no-untyped-def]
    m = {metric.key: metric for metric in comparison.metrics}
    assert m["step_s"].a == pytest.approx(m["step_s"].b + 40, abs=2)  # the straggler's 40 ms per step is gone
    assert m["step_s"].direction.startswith("down") and m["step_s"].better == "B"
    assert m["throughput"].direction.startswith("up") and m["throughput"].better == "B"
    assert m["straggler_gap_ms"].a == pytest.approx(40, abs=2) and m["straggler_gap_ms"].b == 0
    assert m["stall_ms"].better == "B"
    assert m["share_compute"].better == "B"  # a larger compute share is better
    assert m["ranks"].better == "n/a" and m["ranks"].direction == "unchanged"
    assert m["cost_per_step"].better == "B"


def test_an_empty_session_has_no_data_and_names_no_winner(comparison: Comparison, tmp_path: Path) -> None:
    result = empty_and_after(tmp_path, comparison)
    m = {metric.key: metric for metric in result.metrics}
    for key in ("step_s", "throughput", "share_compute", "idle_share", "stall_ms", "straggler_gap_ms"):
        assert m[key].a is None and m[key].direction == "no data" and m[key].better == "n/a", key
