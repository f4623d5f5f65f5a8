"""Reopening a recording: every run comes back in its recorded state (the bulk load itself: test_step_columns)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ringscope.gui.core.analysis.runs import FINISHED, LOST
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.live.replay import runs_from_session
from tests.gui.core.analysis.test_runs import _record


def test_reopened_session_shows_every_run_in_its_recorded_state(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path, lose_tf_rank=True)
    runs = runs_from_session(load(path))
    rows = {row.run_id: row for row in runs.rows(now_s=time.time())}
    assert rows["run-ddp"].state == FINISHED and rows["run-tf"].state == LOST
    assert rows["run-tf"].framework == "tensorflow" and rows["run-tf"].world_size == 2
    assert rows["run-ddp"].duration_s == pytest.approx(5.1, abs=0.2)
    ddp = runs.store("run-ddp").snapshot()  # type: ignore[union-attr]
    assert ddp.ended and ddp.steps_total == 100 and list(ddp.ranks) == [0, 1]
    tf = runs.store("run-tf").snapshot()  # type: ignore[union-attr]
    assert tf.state.count("lost") == 1  # the rank that vanished, judged at the run's end, not at today's clock
    later = {row.run_id: row.state for row in runs.rows(now_s=time.time() + 3600)}
    assert later == {"run-ddp": FINISHED, "run-tf": LOST}  # never re-decided


def test_live_analyzer_prices_the_selected_run_up_to_its_priced_end(tmp_path: Path) -> None:
    from ringscope.gui.core.live.live_analysis import LiveAnalyzer

    path = tmp_path / "s.db"
    _record(path)
    runs = runs_from_session(load(path))
    analyzer = LiveAnalyzer(lambda: load(path), lambda: 2.0, priced_until=runs.priced_until)
    analyzer.select("run-tf")
    figures = analyzer.analyze_now()
    assert figures is not None and figures.run_id == "run-tf"
    assert figures.analysis.framework == "tensorflow" and figures.analysis.steps_total == 200
    row = {r.run_id: r for r in runs.rows()}["run-tf"]
    # the cost panel and the runs table price the same span: the run's own, not the session's
    assert figures.cost.cost_total == pytest.approx(row.cost(2.0), rel=0.02)
    analyzer.select("run-ddp")
    assert analyzer.latest() is None  # never the other run's figures under this run's name
