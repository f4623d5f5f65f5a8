"""LiveRuns without Qt: two runs in one window stay apart; a run's end freezes its figures and never loses money."""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, Hello, Step
from ringscope.agent.wire import Batch
from ringscope.gui.core.analysis.runs import FINISHED, LOST, RUNNING, STOPPED, LaunchOutcome
from ringscope.gui.core.ingest.sink import Gap, Rejection
from ringscope.gui.core.live.runs import PENDING_PER_AGENT, LiveRuns
from ringscope.gui.core.live.snapshot import STATE_FINISHED, STATE_LOST, STATE_STOPPED

T0 = 1_700_000_000.0
AGENTS = 2048  # agents joining while rows are built (8 192 in the report; the race shows within a few rows)


def hello(run_id: str, agent_id: str, ranks: list[int], *, framework: str = "pytorch", strategy: str = "ddp",
          world: int = 2, started: float = T0) -> Hello:
    return Hello(run_id, agent_id, "node0", 1, ranks[0], 0, world, 0, ranks, framework, strategy, None, [], "0.1.0",
                 "1.0", started, 0.0, started)


def step(rank: int, k: int, end: float, *, comm: float = 0.02, comp: float = 0.05) -> Step:
    return Step(rank, k, end - 0.1, end, 0.1, 0.01, comp, comm + 0.01, comm, 32)


def batch(agent_id: str, records: list, seq: int = 0, sent: float = T0) -> Batch:
    return wire.decode(wire.encode(agent_id, seq, sent, records))


def feed(runs: LiveRuns, run_id: str, agents: list[str], steps: int, start: float, *, slow: int | None = None,
         **hello_kwargs: object) -> float:
    """Each agent reports one rank; rank ``slow`` computes longer, so the others wait for it. Returns the end."""
    for r, agent in enumerate(agents):
        runs.on_batch(batch(agent, [hello(run_id, agent, [r], started=start, **hello_kwargs)], sent=start), start)  # type: ignore[arg-type]
    end = start
    for k in range(steps):
        end = start + (k + 1) * 0.1
        for r, agent in enumerate(agents):
            comm, comp = (0.001, 0.09) if r == slow else (0.06, 0.03)
            runs.on_batch(batch(agent, [step(r, k, end, comm=comm, comp=comp)], seq=k + 1, sent=end), end)
    return end


def test_two_runs_never_mix_and_the_new_one_is_the_latest() -> None:
    runs = LiveRuns()
    end_a = feed(runs, "run-a", ["a0", "a1"], 30, T0)
    end_b = feed(runs, "run-b", ["b0"], 20, T0 + 600.0, framework="tensorflow", strategy="mirrored")
    assert runs.run_ids() == ["run-a", "run-b"] and runs.latest_run_id() == "run-b"
    a = runs.store("run-a").snapshot(now_s=end_a)  # type: ignore[union-attr]
    b = runs.store("run-b").snapshot(now_s=end_b)  # type: ignore[union-attr]
    assert (a.framework, a.steps_total, list(a.ranks)) == ("pytorch", 60, [0, 1])
    assert (b.framework, b.steps_total, list(b.ranks)) == ("tensorflow", 20, [0])
    assert b.elapsed_s == pytest.approx(end_b - (T0 + 600.0))  # timed from its own start, not the first run's
    rows = {row.run_id: row for row in runs.rows(now_s=end_b)}
    assert rows["run-b"].framework == "tensorflow" and rows["run-b"].steps == 20
    assert rows["run-a"].state == LOST  # silent for 10 minutes without goodbye
    assert rows["run-b"].state == RUNNING


def test_finished_run_freezes_verdict_throughput_and_cost() -> None:
    runs = LiveRuns()
    end = feed(runs, "run", ["a0", "a1", "a2"], 40, T0, slow=1)
    live = runs.store("run").snapshot(now_s=end)  # type: ignore[union-attr]
    assert live.straggler is not None and live.straggler.rank == 1
    cost_live = runs.rows(now_s=end)[0].cost(2.0)
    for seq, agent in enumerate(["a0", "a1", "a2"]):
        runs.on_batch(batch(agent, [Event(end + 0.05, EventKind.FINISHED, seq)], seq=100), end + 0.05)
    later = end + 60.0  # a minute after the end: nothing may decay or turn lost
    rows = runs.rows(now_s=later)
    assert rows[0].state == FINISHED
    snap = runs.store("run").snapshot(now_s=later)  # type: ignore[union-attr]
    assert snap.ended and snap.state == (STATE_FINISHED,) * 3
    assert snap.straggler is not None and snap.straggler.rank == 1  # the verdict survives the end of the run
    assert snap.steps_per_s == pytest.approx(live.steps_per_s, rel=0.25) and snap.steps_per_s > 0
    assert rows[0].duration_s == pytest.approx(end + 0.05 - T0, abs=0.01)
    assert rows[0].cost(2.0) >= cost_live  # never decreases
    assert runs.rows(now_s=later + 3600)[0].cost(2.0) == rows[0].cost(2.0)  # and stops at the end


def test_stop_from_the_window_is_stopped_not_lost_and_cost_never_decreases() -> None:
    runs = LiveRuns(lost_timeout_s=5.0)
    end = feed(runs, "run", ["a0", "a1"], 20, T0)
    runs.note_stop_requested("run")
    costs = [runs.rows(now_s=end + dt)[0].cost(1.0) for dt in (1.0, 8.0)]  # quiet, but stopping: not lost
    assert runs.rows(now_s=end + 8.0)[0].state == RUNNING
    runs.note_launch("run", LaunchOutcome(STOPPED, -2, end + 9.0, "stopped from the window"))
    row = runs.rows(now_s=end + 30.0)[0]
    assert row.state == STOPPED and row.exit_code == -2
    costs.append(row.cost(1.0))
    assert costs == sorted(costs)
    snap = runs.store("run").snapshot(now_s=end + 30.0)  # type: ignore[union-attr]
    assert snap.state == (STATE_STOPPED, STATE_STOPPED)  # not "lost" after the timeout


def test_a_vanished_rank_makes_the_run_lost_and_a_late_verdict_keeps_the_later_end() -> None:
    runs = LiveRuns(lost_timeout_s=3.0)
    end = feed(runs, "run", ["a0", "a1"], 20, T0)
    for k in range(20, 60):  # a0 goes on, a1 vanished at end
        t = T0 + (k + 1) * 0.1
        runs.on_batch(batch("a0", [step(0, k, t)], seq=k + 1), t)
    now = T0 + 6.1
    row = runs.rows(now_s=now)[0]
    assert row.state == LOST
    snap = runs.store("run").snapshot(now_s=now)  # type: ignore[union-attr]
    assert snap.state[1] == STATE_LOST and snap.state[0] != STATE_LOST
    assert not snap.ended  # rank 0 still sends: the run goes on, its figures keep moving
    lost_cost = row.cost(1.0)
    runs.note_launch("run", LaunchOutcome(STOPPED, -9, end + 0.5))  # the launcher's word arrives later
    assert runs.rows(now_s=now + 10)[0].cost(1.0) >= lost_cost


def test_records_before_hello_wait_bounded_then_reach_the_run() -> None:
    runs = LiveRuns()
    for k in range(PENDING_PER_AGENT + 10):  # the collector started after the agent: no hello yet
        runs.on_batch(batch("late", [step(0, k, T0 + k * 0.1)], seq=k), T0 + k * 0.1)
    assert runs.run_ids() == []
    runs.on_batch(batch("late", [hello("run-late", "late", [0])], seq=500), T0 + 10)
    snap = runs.store("run-late").snapshot(now_s=T0 + 10)  # type: ignore[union-attr]
    assert snap.steps_total == PENDING_PER_AGENT  # the newest held ones, bounded


def test_gaps_go_to_their_run_and_rejections_to_every_run() -> None:
    runs = LiveRuns()
    feed(runs, "run-a", ["a0"], 3, T0)
    feed(runs, "run-b", ["b0"], 3, T0 + 1)
    runs.on_gap(Gap("b0", 4, 9, T0 + 2))
    runs.on_rejection(Rejection("malformed", "bad", T0 + 2, 10))
    a = runs.store("run-a").snapshot(now_s=T0 + 2)  # type: ignore[union-attr]
    b = runs.store("run-b").snapshot(now_s=T0 + 2)  # type: ignore[union-attr]
    assert a.counters["missing_messages"] == 0 and b.counters["missing_messages"] == 5
    assert a.counters["rejected"] == {"malformed": 1} == b.counters["rejected"]


def test_old_ended_runs_are_released_but_keep_their_row() -> None:
    runs = LiveRuns(max_runs=2)
    for i in range(4):
        start = T0 + 100 * i
        end = feed(runs, f"run-{i}", [f"a{i}"], 5, start)
        runs.on_batch(batch(f"a{i}", [Event(end, EventKind.FINISHED, 0)], seq=50), end)
    rows = runs.rows(now_s=T0 + 1000)
    assert [r.run_id for r in rows] == ["run-0", "run-1", "run-2", "run-3"]
    assert [r.in_memory for r in rows] == [False, False, True, True]
    assert rows[0].state == FINISHED and rows[0].steps == 5 and not math.isnan(rows[0].duration_s)
    assert runs.store("run-0") is None


def test_a_run_whose_ranks_stop_completing_steps_is_hung_and_names_the_rank_outside_the_collective() -> None:
    from ringscope.agent.schema import Heartbeat
    from ringscope.gui.core.analysis.runs import HUNG

    runs = LiveRuns(lost_timeout_s=3.0)
    end = feed(runs, "run", ["a0", "a1"], 50, T0)
    t, seq = end, 100
    while t < end + 12.0:  # both agents alive (heartbeats), no step completes
        t += 1.0
        seq += 1
        runs.on_batch(batch("a0", [Heartbeat(t, 0, "collective", end + 0.01, 50, 3)], seq=seq), t)
        stack = '  File "train.py", line 42, in train_step\n    blocker.wait()' if t - end > 5 else None
        runs.on_batch(batch("a1", [Heartbeat(t, 1, "compute", end, 50, None, stack)], seq=seq), t)
        state = runs.rows(now_s=t)[0].state
        assert state == (HUNG if t - end > 10.0 else RUNNING), (t - end, state)
    verdict = runs.hang("run")
    assert verdict is not None and [p.rank for p in verdict.stuck] == [1] and [p.rank for p in verdict.waiting] == [0]
    assert "line 42" in verdict.stacks[1]  # kept although later beats of the same episode carry no stack
    assert runs.agent_of_rank("run", 1) == "a1"
    # the rank comes back: steps again, running again
    runs.on_batch(batch("a0", [step(0, 50, t + 0.5)], seq=seq + 1), t + 0.5)
    assert runs.rows(now_s=t + 0.6)[0].state == RUNNING and runs.hang("run") is None


def test_sigkill_of_a_rank_is_lost_not_hung() -> None:
    from ringscope.agent.schema import Heartbeat

    runs = LiveRuns(lost_timeout_s=2.5)
    end = feed(runs, "run", ["a0", "a1"], 50, T0)
    for k in range(1, 4):  # a1 is dead: only a0 beats, waiting in the collective
        runs.on_batch(batch("a0", [Heartbeat(end + k, 0, "collective", end, 50, 0)], seq=200 + k), end + k)
    assert runs.rows(now_s=end + 3.0)[0].state == LOST


def test_a_host_whose_clock_is_two_seconds_ahead_is_shown_on_the_collectors_clock() -> None:
    runs = LiveRuns()
    for r, skew in ((0, 0.0), (1, 2.0)):  # agent a1's host clock runs 2 s ahead
        runs.on_batch(batch(f"a{r}", [hello("run-s", f"a{r}", [r], started=T0 + skew)], sent=T0 + skew - 0.0002),
                      T0)
    for k in range(20):
        end = T0 + (k + 1) * 0.1
        for r, skew in ((0, 0.0), (1, 2.0)):
            runs.on_batch(batch(f"a{r}", [step(r, k, end + skew)], seq=k + 1, sent=end + skew - 0.0003), end)
    data = runs.store("run-s").to_session_data()  # type: ignore[union-attr]
    ends = {r: data.steps_of(r)["end_s"] for r in (0, 1)}
    assert np.abs(ends[0] - ends[1]).max() < 0.001
    assert ends[0][0] == pytest.approx(T0 + 0.1)


def test_the_runs_table_is_built_safely_while_agents_keep_joining() -> None:
    """The collector thread registers agents while the window's side builds rows: 8 192 ranks joining made the
    ingest process crash with "dictionary changed size during iteration" in the row builder."""
    runs, joined, stop = LiveRuns(), [0], threading.Event()
    runs.on_batch(batch("a0", [hello("big", "a0", [0], world=AGENTS)]), T0)

    def collector() -> None:
        for r in range(1, AGENTS):
            runs.on_batch(batch(f"a{r}", [hello("big", f"a{r}", [r], world=AGENTS)]), T0 + r * 1e-4)
            joined[0] = r + 1
        stop.set()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: the race shows within a few rows
    thread = threading.Thread(target=collector)
    built = 0
    try:
        thread.start()
        while not stop.is_set():
            row = runs.rows(now_s=T0 + 1.0, refresh=built % 2 == 0)[0]
            assert row.hosts == 1 and row.started_s == T0 and row.world_size == AGENTS
            built += 1
    finally:
        sys.setswitchinterval(previous)
        thread.join()
    assert joined[0] == AGENTS and built > 10
    assert runs.rows(now_s=T0 + 1.0)[0].world_size == AGENTS


def test_a_run_in_slurm_jobs_names_each_job_it_ran_in() -> None:
    """Hello.job_id (SLURM_JOB_ID): a resubmitted run shows both jobs, in the order they joined; others none."""
    runs = LiveRuns()
    first = hello("slurm", "a0", [0])
    first.job_id = "4100"
    second = hello("slurm", "a1", [0])
    second.job_id, second.attempt = "4117", 2
    runs.on_batch(batch("a0", [first]), T0)
    runs.on_batch(batch("a1", [second], sent=T0 + 60), T0 + 60)
    feed(runs, "local", ["b0"], 3, T0)
    rows = {row.run_id: row for row in runs.rows(T0 + 61)}
    assert rows["slurm"].job_ids == ("4100", "4117") and rows["slurm"].job_text == "jobs 4100, 4117"
    assert rows["local"].job_ids == () and rows["local"].job_text == ""


def test_a_slurm_jobs_state_reaches_its_row_even_when_said_before_any_agent() -> None:
    """The follower tells the collector each state of the job (``scheduler`` attempt notes): one said while the job
    was queued (no agent yet) is kept for the run's row; goodput and the attempts column ignore these notes."""
    from ringscope.agent.control import AttemptNote

    runs = LiveRuns()
    runs.on_attempt("slurm", AttemptNote(1, "scheduler", T0 - 30, "queued", None, "job 41 queued (Resources)"))
    feed(runs, "slurm", ["s0", "s1"], 5, T0)
    [row] = runs.rows(T0 + 1)
    assert row.scheduler == "job 41 queued (Resources)" and row.scheduler_word == "queued"
    runs.on_attempt("slurm", AttemptNote(1, "scheduler", T0 + 1, "running", None, "job 41 running on node-[0-1]"))
    runs.on_attempt("slurm", AttemptNote(1, "scheduler", T0 + 2, "timeout", 124, "job 41 timeout"))
    [row] = runs.rows(T0 + 3)
    assert row.scheduler == "job 41 timeout" and row.scheduler_word == "timeout"
    assert row.attempts == 1 and row.attempt_reasons == ()
    for n in range(300):  # queued jobs that never start are bounded
        runs.on_attempt(f"never-{n}", AttemptNote(1, "scheduler", T0, "queued", None, f"job {n} queued (Priority)"))
    assert len(runs._early_scheduler) == 256 and "never-299" in runs._early_scheduler
