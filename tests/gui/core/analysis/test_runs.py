"""Runs in recorded sessions: two trainings in one file stay apart, with their own identity, state and figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, Hello, Step
from ringscope.gui.core.analysis.cost import estimate_cost
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.analysis.runs import (
    FAILED,
    FINISHED,
    LOST,
    RUNNING,
    STOPPED,
    UNFINISHED,
    LaunchOutcome,
    decide_state,
    pick_run,
    runs_of,
)
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load

T0 = 1_700_000_000.0


def _hello(run_id: str, agent_id: str, ranks: list[int], *, framework: str, strategy: str, world: int,
           started: float) -> Hello:
    return Hello(run_id, agent_id, "node0", 1, ranks[0], 0, world, 0, ranks, framework, strategy, None, [], "0.1.0",
                 "1.0", started, 0.0, started)


def _steps(ranks: list[int], count: int, start: float, *, compute: float | None = 0.05) -> list[Step]:
    out = []
    for k in range(count):
        end = start + (k + 1) * 0.1
        for r in ranks:
            comm = None if compute is None else 0.02
            out.append(Step(r, k, end - 0.1, end, 0.1, None if compute is None else 0.01, compute, comm, comm, 32))
    return out


def _record(path: Path, *, finish_ddp: bool = True, tf_fit: bool = False, lose_tf_rank: bool = False) -> None:
    """A DDP run (2 agents) then, 60 s later, a single-process MirroredStrategy run with 2 replicas."""
    recorder = Recorder(path).start()
    t_ddp, t_tf = T0, T0 + 60.0
    for r in (0, 1):
        agent = f"ddp-{r}"
        recorder.on_batch(wire.Batch(agent, 0, t_ddp, (1, 0), [
            _hello("run-ddp", agent, [r], framework="pytorch", strategy="ddp", world=2, started=t_ddp)]), t_ddp)
        recorder.on_batch(wire.Batch(agent, 1, t_ddp, (1, 0), _steps([r], 50, t_ddp)), t_ddp + 5.0)
        if finish_ddp:
            recorder.on_batch(wire.Batch(agent, 2, t_ddp, (1, 0), [Event(t_ddp + 5.1, EventKind.FINISHED, r)]),
                              t_ddp + 5.1)
    tf_agents = ["tf-0", "tf-1"] if lose_tf_rank else ["tf-0"]
    for i, agent in enumerate(tf_agents):
        ranks = [i] if lose_tf_rank else [0, 1]
        recorder.on_batch(wire.Batch(agent, 0, t_tf, (1, 0), [
            _hello("run-tf", agent, ranks, framework="tensorflow", strategy="mirrored", world=2, started=t_tf)]),
            t_tf)
        last = 30 if (lose_tf_rank and i == 1) else 100
        recorder.on_batch(wire.Batch(agent, 1, t_tf, (1, 0),
                                     _steps(ranks, last, t_tf, compute=None if tf_fit else 0.05)),
                          t_tf + last * 0.1)
    recorder.on_batch(wire.Batch("tf-0", 5, t_tf, (1, 0), [Event(t_tf + 10.1, EventKind.FINISHED, 0)]), t_tf + 10.1)
    recorder.close()


def test_two_runs_in_one_session_keep_their_identity_duration_and_cost(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    data = load(path)
    runs = {r.run_id: r for r in runs_of(data)}
    assert list(runs) == ["run-ddp", "run-tf"]
    ddp, tf = runs["run-ddp"], runs["run-tf"]
    assert (ddp.framework, ddp.strategy, ddp.world_size, ddp.ranks) == ("pytorch", "ddp", 2, (0, 1))
    # one MirroredStrategy process with 2 replicas announces world size 2: never multiplied to 4
    assert (tf.framework, tf.strategy, tf.world_size, tf.ranks) == ("tensorflow", "mirrored", 2, (0, 1))
    assert ddp.state == FINISHED and tf.state == FINISHED
    assert ddp.steps == 100 and tf.steps == 200
    assert ddp.duration_s(0) == pytest.approx(5.1, abs=0.2)  # its own span, not the 60 idle seconds after it
    assert tf.duration_s(0) == pytest.approx(10.1, abs=0.2)
    # each run's analysis and cost see only that run
    a_tf = analyze(data.for_run("run-tf"))
    assert a_tf.framework == "tensorflow" and a_tf.world_size == 2 and a_tf.steps_total == 200
    cost_tf = estimate_cost(a_tf, data.for_run("run-tf"), 3.6)
    assert cost_tf.duration_s == pytest.approx(10.0, abs=0.2)
    assert cost_tf.cost_total == pytest.approx(2 * 10.0 / 3600 * 3.6, rel=0.05)
    whole = summarize(path)
    assert [r["run_id"] for r in whole["runs"]] == ["run-ddp", "run-tf"]
    assert whole["runs"][1]["world_size"] == 2 and whole["runs"][1]["framework"] == "tensorflow"
    json.dumps(whole, allow_nan=False)  # standard JSON: no NaN / Infinity anywhere


def test_keras_fit_phases_stay_unknown_and_are_never_priced_as_waiting(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path, tf_fit=True)
    data = load(path).for_run("run-tf")
    analysis = analyze(data)
    assert not analysis.overall.phases_measured
    assert math.isnan(analysis.overall.idle_share)  # was 100 %: unknown folded into "other"
    cost = estimate_cost(analysis, data, 2.0)
    assert not cost.waste_measured and cost.waste_total == 0.0 and cost.cost_total > 0


def test_a_rank_that_vanished_makes_its_run_lost_and_the_launcher_says_stopped_or_failed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path, finish_ddp=False, lose_tf_rank=True)
    data = load(path)
    runs = {r.run_id: r for r in runs_of(data)}
    assert runs["run-tf"].state == LOST  # tf-1 stopped at step 30 without goodbye while tf-0 went on
    assert runs["run-ddp"].state == LOST  # silent for 60 s without goodbye
    stopped = {r.run_id: r for r in runs_of(data, launches={
        "run-ddp": LaunchOutcome(STOPPED, -2, T0 + 6.0, "stopped from the window")})}
    assert stopped["run-ddp"].state == STOPPED and stopped["run-ddp"].exit_code == -2
    assert stopped["run-ddp"].end_s == pytest.approx(T0 + 6.0)


def test_launch_outcomes_recorded_by_the_window_are_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = Recorder(path).start()
    recorder.on_batch(wire.Batch("a", 0, T0, (1, 0), [
        _hello("run-x", "a", [0], framework="pytorch", strategy="ddp", world=1, started=T0)]), T0)
    recorder.note_launch("run-x", FAILED, 3, T0 + 2.0, "rank0 failed with exit code 3")
    recorder.close()
    runs = runs_of(load(path))
    assert [(r.run_id, r.state, r.exit_code) for r in runs] == [("run-x", FAILED, 3)]


def test_decide_state_rule() -> None:
    assert decide_state(agents=2, finished=2, silent=0) == FINISHED
    assert decide_state(agents=2, finished=1, silent=1) == LOST
    assert decide_state(agents=2, finished=0, silent=0) == RUNNING
    assert decide_state(agents=2, finished=0, silent=0, recording_closed=True) == UNFINISHED
    assert decide_state(agents=2, finished=0, silent=2, launch=LaunchOutcome(STOPPED, 0, T0)) == STOPPED
    assert decide_state(agents=2, finished=1, silent=0, launch=LaunchOutcome(FINISHED, 0, T0)) == FINISHED


def test_pick_run_names_the_runs_when_the_choice_is_ambiguous(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    runs = runs_of(load(path))
    with pytest.raises(LookupError, match=r"holds 2 runs.*run-ddp.*run-tf"):
        pick_run(runs, None)
    assert pick_run(runs, "run-t").run_id == "run-tf"
    with pytest.raises(LookupError, match="no run 'nope'"):
        pick_run(runs, "nope")
