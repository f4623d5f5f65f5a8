"""What heartbeats cost the training: the position marks on the training thread, and the beat thread's A/B.

    python -m benchmarks heartbeat

* training-thread cost of one step's marks: three ``Position.enter`` calls (data wait, compute, collective), timed
  in a tight loop;
* the heartbeat thread's own cost per beat, with and without a stack capture (a stuck rank), on its thread;
* A/B on the step of the peer workload of shared/ENVIRONMENT.md (``nn.Linear(20, 1)``, batch 32, SGD; one process,
  the all-reduce left out: the question is what the beat thread takes from the training thread): blocks of steps
  with a real agent's heartbeat thread running vs stopped, interleaved ABBA in one run, median ratio and range.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from ringscope.agent.heartbeat import COLLECTIVE, COMPUTE, DATA_WAIT, HeartbeatThread, Position


def _mark_cost_ns(steps: int) -> float:
    position = Position(0)
    started = time.perf_counter_ns()
    for k in range(steps):
        position.enter(DATA_WAIT, k)
        position.enter(COMPUTE)
        position.enter(COLLECTIVE, k, 0)
    return (time.perf_counter_ns() - started) / steps


def _beat_cost_us(stuck: bool, beats: int) -> float:
    position = Position(0)
    position.enter(COMPUTE, 1)
    sent: list[Any] = []
    thread = HeartbeatThread([position], sent.append, stack_after_s=0.0 if stuck else 1e9)
    started = time.perf_counter()
    for _ in range(beats):
        if stuck:
            thread.request_stacks()
        thread.beat()
    return (time.perf_counter() - started) / beats * 1e6


def _ab(rounds: int, block: int) -> tuple[float, float, float, float]:
    import torch
    from torch import nn

    torch.set_num_threads(1)
    model = nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 20), torch.randn(32, 1)
    position = Position(0)

    def run_block() -> float:
        times = []
        for k in range(block):
            started = time.perf_counter()
            position.enter(DATA_WAIT, k)
            position.enter(COMPUTE)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            position.enter(COLLECTIVE, k, 0)
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    sent: list[Any] = []
    ratios = []
    base_step = []
    for index in range(rounds):
        order = ("on", "off") if index % 2 == 0 else ("off", "on")  # ABBA
        medians = {}
        for variant in order:
            beat = None
            if variant == "on":  # a real beat thread at 10 Hz (10x the default rate): an upper bound
                beat = HeartbeatThread([position], sent.append, interval_s=0.1).start()
            medians[variant] = run_block()
            if beat is not None:
                beat.close()
        ratios.append(medians["on"] / medians["off"])
        base_step.append(medians["off"])
    return statistics.median(ratios), min(ratios), max(ratios), statistics.median(base_step)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Rows: mark cost, beat cost, A/B ratio."""
    rows: list[dict[str, Any]] = []
    rows.append({"benchmark": "heartbeat", "metric": "training-thread cost of one step's position marks",
                 "value": _mark_cost_ns(20_000 if quick else 200_000) / 1e3, "unit": "µs",
                 "note": "three Position.enter calls (data wait, compute, collective): attribute stores, no lock"})
    rows.append({"benchmark": "heartbeat", "metric": "beat, no stack", "value": _beat_cost_us(False, 2000),
                 "unit": "µs", "note": "on the agent's heartbeat thread, once a second per rank"})
    rows.append({"benchmark": "heartbeat", "metric": "beat with a stack capture", "value": _beat_cost_us(True, 200),
                 "unit": "µs", "note": "only for a rank stuck 5 s in one phase, once per episode (or on request)"})
    threads = threading.active_count()
    median, low, high, step = _ab(8 if quick else 40, 200 if quick else 1000)
    rows.append({"benchmark": "heartbeat", "metric": "peer step with the beat thread on / off", "value": median,
                 "unit": "x", "note": f"median of {8 if quick else 40} ABBA pairs, range {low:.3f}..{high:.3f}; beat "
                                      f"at 10 Hz (10x the default); step {step * 1e6:.0f} µs; {threads} threads"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
