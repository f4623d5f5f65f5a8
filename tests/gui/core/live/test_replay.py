"""Reopening a recording: the bulk load equals live ingest, and every run comes back in its recorded state."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.analysis.runs import FINISHED, LOST
from ringscope.gui.core.ingest.session import load
from ringscope.gui.core.live.replay import runs_from_session
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.session_data import columns_from_rows
from tests.gui.core.analysis.test_runs import T0, _record


def _steps(ranks: int, count: int) -> list[Step]:
    rng = np.random.default_rng(7)
    out = []
    for k in range(count):
        for r in range(ranks):
            end = T0 + (k + 1) * 0.1 + rng.uniform(0, 0.01)
            comm = 0.001 if r == 1 else float(rng.uniform(0.02, 0.05))
            out.append(Step(r, k, end - 0.1, end, 0.1, 0.01, 0.05, comm + 0.005, comm, 32, None, None, None, k == 0))
    return out


def test_bulk_load_leaves_the_same_state_as_live_ingest() -> None:
    steps = _steps(4, 900)  # 90 s: more than the 60-bucket ring below, so both paths merge buckets
    hello = Hello("run", "a", "h", 1, 0, 0, 4, 0, [0, 1, 2, 3], "pytorch", "ddp", None, [], "0.1.0", "1.1", T0, 0.0,
                  T0)
    live = LiveStore(buckets=60)
    live.on_batch(wire.Batch("a", 0, T0, (1, 1), [hello]), T0)
    for i in range(0, len(steps), 40):
        live.on_batch(wire.Batch("a", 1 + i, T0, (1, 1), steps[i:i + 40]), steps[i].end_s)
    bulk = LiveStore(buckets=60)
    bulk.on_batch(wire.Batch("a", 0, T0, (1, 1), [hello]), T0)
    bulk.load_steps(columns_from_rows("step", [wire.record_values(s) for s in steps]))
    now = T0 + 91.0
    a, b = live.snapshot(now_s=now), bulk.snapshot(now_s=now)
    assert b.bucket_s == a.bucket_s == 2.0
    assert a.steps_total == b.steps_total == len(steps)
    np.testing.assert_array_equal(a.current_step, b.current_step)
    np.testing.assert_allclose(a.recent_comm_exposed_s, b.recent_comm_exposed_s, rtol=1e-6)
    np.testing.assert_allclose(a.step_pct_s, b.step_pct_s, rtol=1e-6)
    used = np.isfinite(a.bucket_start_s)
    np.testing.assert_array_equal(used, np.isfinite(b.bucket_start_s))
    np.testing.assert_allclose(a.heat_comm_exposed_share[:, used], b.heat_comm_exposed_share[:, used], rtol=1e-5)
    np.testing.assert_allclose(a.cluster_phase_s["step"][used], b.cluster_phase_s["step"][used], rtol=1e-5)
    assert a.state == b.state == ("running",) * 4
    assert a.straggler is not None and b.straggler is not None and a.straggler.rank == b.straggler.rank == 1


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
