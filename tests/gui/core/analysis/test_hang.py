"""The hang rule: no step for the threshold while ranks are alive; the rank that did not reach the collective."""

from __future__ import annotations

import math

import pytest

from ringscope.gui.core.analysis.hang import RankPosition, hang_threshold_s, judge_hang

T0 = 1_700_000_000.0


def test_threshold_is_ten_seconds_or_twenty_steps() -> None:
    assert hang_threshold_s(0.1) == 10.0
    assert hang_threshold_s(2.0) == 40.0
    assert hang_threshold_s(math.nan) == 10.0


def test_no_verdict_while_steps_complete_or_before_the_first() -> None:
    alive = {0, 1}
    assert judge_hang(now_s=T0 + 9, last_step_end_s=T0, median_step_s=0.1, alive_ranks=alive, positions={},
                      devices=2) is None
    assert judge_hang(now_s=T0 + 99, last_step_end_s=math.nan, median_step_s=0.1, alive_ranks=alive, positions={},
                      devices=2) is None
    assert judge_hang(now_s=T0 + 99, last_step_end_s=T0, median_step_s=0.1, alive_ranks=set(), positions={},
                      devices=2) is None  # nobody alive: that is a lost run, not a hung one


def test_the_rank_outside_the_collective_is_named_with_its_stack_and_the_cost() -> None:
    positions = {
        0: RankPosition(0, "collective", T0 + 0.05, 50, bucket=3),
        1: RankPosition(1, "compute", T0 + 0.01, 50,
                        stack='  File "train.py", line 42, in train_step\n    time.sleep(1e9)'),
        2: RankPosition(2, "collective", T0 + 0.04, 50, bucket=3),
    }
    verdict = judge_hang(now_s=T0 + 30, last_step_end_s=T0, median_step_s=0.1, alive_ranks={0, 1, 2},
                         positions=positions, devices=3)
    assert verdict is not None
    assert [p.rank for p in verdict.stuck] == [1] and [p.rank for p in verdict.waiting] == [0, 2]
    assert "line 42" in verdict.stacks[1]
    assert verdict.waited_s(T0 + 30) == pytest.approx(29.96)
    assert verdict.device_hours(T0 + 3600) == pytest.approx(3.0)
    text = verdict.summary(T0 + 30)
    assert "rank 1 (in compute, step 50) did not reach the collective" in text and "2 rank(s) wait" in text


def test_everybody_in_the_collective_names_nobody() -> None:
    positions = {r: RankPosition(r, "collective", T0, 7) for r in range(4)}
    verdict = judge_hang(now_s=T0 + 60, last_step_end_s=T0, median_step_s=0.5, alive_ranks=set(range(4)),
                         positions=positions, devices=4)
    assert verdict is not None and not verdict.stuck and "every rank waits" in verdict.summary(T0 + 60)
    old_agents = judge_hang(now_s=T0 + 60, last_step_end_s=T0, median_step_s=0.5, alive_ranks={0, 1},
                            positions={}, devices=2)
    assert old_agents is not None and old_agents.unknown == (0, 1) and "unknown" in old_agents.summary(T0 + 60)
