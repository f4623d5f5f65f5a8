"""The agents' clocks put on the collector's (``ringscope.gui.core.ingest.clocks``): a recording loaded by the reader,
and batches aligned live."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.ingest.clocks import CLOCK_ALIGN_MIN_S, ClockAligner
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load


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
