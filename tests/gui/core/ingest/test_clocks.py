"""The agents' clocks put on the collector's (``ringscope.gui.core.ingest.clocks``): a recording loaded by the reader,
and batches aligned live."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest.clocks import CLOCK_ALIGN_MIN_S, ClockAligner
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.live.runs import LiveRuns


def test_a_session_from_a_host_whose_clock_is_off_loads_on_the_collectors_clock(tmp_path: Path) -> None:
    path = tmp_path / "skew.db"
    recorder = Recorder(path).start()
    for seq in range(5):  # agent "b" runs 2 s ahead; both steps k end at collector time 100 + k
        now = 100.0 + seq
        recorder.on_batch(wire.Batch("a", seq, now - 0.0003, (1, 2), [Step(0, seq, now - 0.5, now, 0.5)]), now)
        recorder.on_batch(wire.Batch("b", seq, now + 2.0 - 0.0004, (1, 2),
                                     [Step(1, seq, now + 1.5, now + 2.0, 0.5)]), now)
    recorder.close()
    data = load(path)
    assert set(data.counters["clock_offsets"]) == {"b"}  # 0.3 ms is the path, not a clock: "a" is left alone
    ends = {r: data.steps_of(r)["end_s"] for r in (0, 1)}
    assert np.abs(ends[0] - ends[1]).max() < 0.001
    assert np.array_equal(ends[0], 100.0 + np.arange(5))


def test_live_batches_move_onto_the_collectors_clock_only_when_the_offset_is_a_clock_not_the_path() -> None:
    aligner = ClockAligner()
    near = wire.Batch("near", 0, 99.9997, (1, 2), [Step(0, 0, 99.0, 99.5, 0.5)])
    assert aligner.align(near, 100.0) is near  # 0.3 ms: the path's delay, left alone
    ahead = aligner.align(wire.Batch("ahead", 0, 102.0, (1, 2), [Step(1, 0, 101.0, 101.5, 0.5)]), 100.0)
    assert aligner.offset("ahead") == -2.0 and abs(aligner.offset("ahead")) >= CLOCK_ALIGN_MIN_S
    assert (ahead.records[0].start_s, ahead.records[0].end_s) == (99.0, 99.5)


def _hello(agent_id: str, rank: int, *, clock_ahead_s: float = 0.0) -> Hello:
    """A Hello as an agent sends it (its own wall and monotonic clocks now); ``clock_ahead_s``: a host whose wall
    clock is that far ahead of this machine's."""
    now = time.time() + clock_ahead_s
    return Hello("run", agent_id, "node", 1, rank, 0, 2, 0, [rank], "pytorch", "ddp", "gloo", [], "1", "1", now,
                 time.monotonic(), now)


def test_a_collector_that_reads_late_does_not_move_the_steps_of_agents_on_its_own_clock() -> None:
    """The first messages of a join storm wait in the collector's queue: their transit is the backlog, not a clock.
    An agent reading this machine's clock (its Hello's wall minus monotonic clock is this machine's boot time) keeps
    its times; a host whose clock is 2 s ahead is still moved onto the collector's."""
    runs = LiveRuns()
    now = time.time()
    backlog_s = 1.5
    for agent_id, rank, ahead in (("here", 0, 0.0), ("ahead", 1, 2.0)):
        hello = _hello(agent_id, rank, clock_ahead_s=ahead)
        step = Step(rank, 0, now - 0.5 + ahead, now + ahead, 0.5)
        # sent at `now` on the agent's clock, read backlog_s later by the collector
        runs.on_batch(wire.decode(wire.encode(agent_id, 0, now + ahead, [hello, step])), now + backlog_s)
    store = runs.store("run")
    assert store is not None
    ends = store.to_session_data().steps
    end_of = dict(zip(ends["rank"].tolist(), ends["end_s"].tolist(), strict=True))
    assert abs(end_of[0] - now) < 1e-6  # not moved by the backlog (old rule: now + 1.5)
    assert abs(end_of[1] - (now + backlog_s)) < 1e-6  # ahead by 2 s, read 1.5 s late: the smallest transit so far
