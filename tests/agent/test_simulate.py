"""The simulated cluster: the synchronous step model, argument checks, and a run through the real agent path."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, Hello, Step
from ringscope.agent.simulate import _Config, parse_straggler, run_cluster, step_phases


def _config(ranks: int = 16, straggler: tuple[int, float] | None = None, stall: float = 0.0) -> _Config:
    return _Config(ranks, 0, ranks, "tcp://127.0.0.1:1", 0.1, 10, straggler, stall, "r", 1)


def test_every_rank_ends_together_and_the_straggler_waits_least() -> None:
    phases = step_phases(_config(straggler=(5, 40.0)), np.random.default_rng(1))
    assert np.ptp(phases["step"]) < 1e-12
    assert int(np.argmin(phases["exposed"])) == 5
    others = np.delete(phases["exposed"], 5)
    assert np.all(others - phases["exposed"][5] > 0.035)  # ~ the straggler's 40 ms, minus jitter
    total = phases["data_wait"] + phases["compute"] + phases["exposed"]
    assert np.all(total < phases["step"])  # the rest is "other"


def test_data_stall_shows_as_data_wait() -> None:
    base = step_phases(_config(), np.random.default_rng(1))
    stalled = step_phases(_config(stall=0.03), np.random.default_rng(1))
    assert np.allclose(stalled["data_wait"] - base["data_wait"], 0.03)
    assert np.allclose(stalled["step"] - base["step"], 0.03)


@pytest.mark.parametrize("text", ["5", "a:3", "3:x", "-1:3", "2:-4"])
def test_bad_straggler_values_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="straggler"):
        parse_straggler(text)


def test_straggler_outside_the_cluster_is_refused() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        run_cluster(4, endpoint="tcp://127.0.0.1:1", steps=1, straggler=(4, 10.0))


def test_run_sends_marked_simulated_records_through_agents() -> None:
    context = zmq.Context()
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        result = run_cluster(4, endpoint=f"tcp://127.0.0.1:{port}", steps_per_second=50, steps=10,
                             straggler=(2, 10.0), processes=0)
        records = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(records) < result.sent_records:
            if pull.poll(200):
                records.extend(wire.decode(pull.recv_multipart()[-1]).records)
    finally:
        pull.close(0)
        context.term()
    assert result.steps == 10 and result.step_records == 40 and result.dropped_records == 0
    hellos = [r for r in records if isinstance(r, Hello)]
    assert {h.framework for h in hellos} == {"simulated"}
    assert {tuple(h.ranks) for h in hellos} == {(0,), (1,), (2,), (3,)}
    steps = [r for r in records if isinstance(r, Step)]
    assert len(steps) == 40
    gpus = [r for r in records if isinstance(r, GpuSample)]
    assert gpus and all(g.name == "Simulated GPU" for g in gpus)
    by_rank = {r: np.median([s.comm_exposed_s for s in steps if s.rank == r]) for r in range(4)}
    assert min(by_rank, key=by_rank.__getitem__) == 2


def test_without_a_collector_the_run_gives_up_and_says_so() -> None:
    started = time.monotonic()
    result = run_cluster(2, endpoint="tcp://127.0.0.1:1", steps_per_second=20, duration_s=60, processes=0,
                         give_up_after_s=0.5)
    assert time.monotonic() - started < 10
    assert not result.delivered and not result.ok
    assert result.problems == ("nothing delivered: no collector took a single message at tcp://127.0.0.1:1 within "
                               "0.5 s of the first step",)
