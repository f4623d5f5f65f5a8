"""What the agent costs a training: µs per step record on the training thread, and the import time of ``agent``.

With and without a collector listening, measured in interleaved rounds in one run so the ratio is fair.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import zmq

from ringscope import agent
from ringscope.trainers.common import free_port


class _Drain:
    """A ROUTER socket on a thread that receives and discards (a collector that keeps up)."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.stop = threading.Event()
        self.received = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.socket.poll(100):
                self.socket.recv_multipart()[-1]
                self.received += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.socket.close(0)
        self.context.term()


def _per_step_us(telemetry: agent.Agent, count: int) -> float:
    start = time.perf_counter()
    now = time.time()
    for i in range(count):
        telemetry.step(0, i, now, now + 0.1, data_wait_s=0.01, compute_s=0.07, comm_s=0.02, comm_exposed_s=0.01,
                       samples=32, loss=1.0)
    return (time.perf_counter() - start) / count * 1e6


def _import_time_s() -> float:
    code = "import time; t = time.perf_counter(); import agent; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                  env=env).stdout) for _ in range(3)]
    return min(times)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Rows: µs per step record (no collector / collector listening), drops, import time."""
    count = 20_000 if quick else 200_000
    rounds = 3
    drain = _Drain()
    listening = agent.start(framework="other", strategy="single", endpoint=f"tcp://127.0.0.1:{drain.port}",
                            sample_devices=False, queue_capacity=count + 10)
    lonely = agent.start(framework="other", strategy="single", endpoint=f"tcp://127.0.0.1:{free_port()}",
                         sample_devices=False, queue_capacity=count + 10)
    with_us, without_us = [], []
    try:
        for _ in range(rounds):  # interleaved, so machine load hits both alike
            with_us.append(_per_step_us(listening, count))
            time.sleep(0.3)
            without_us.append(_per_step_us(lonely, count))
            time.sleep(0.3)
        time.sleep(0.5)
        listening_stats, lonely_stats = listening.stats, lonely.stats
    finally:
        listening.close(2.0)
        lonely.close(2.0)
        drain.close()
    assert listening_stats is not None and lonely_stats is not None
    with_median = sorted(with_us)[rounds // 2]
    without_median = sorted(without_us)[rounds // 2]
    note = f"median of {rounds} interleaved rounds x {count} records"
    return [
        {"benchmark": "agent", "metric": "step record, collector listening", "value": with_median, "unit": "µs",
         "note": note + " (target <= 5)"},
        {"benchmark": "agent", "metric": "step record, no collector", "value": without_median, "unit": "µs",
         "note": note},
        {"benchmark": "agent", "metric": "ratio listening / no collector", "value": with_median / without_median,
         "unit": "x", "note": "same run"},
        {"benchmark": "agent", "metric": "records dropped, collector listening",
         "value": float(listening_stats.dropped_records), "unit": "records",
         "note": f"of {rounds * count} (+ hello/health); sent {listening_stats.sent_records}"},
        {"benchmark": "agent", "metric": "records dropped, no collector", "value": float(lonely_stats.dropped_records),
         "unit": "records", "note": "counted, never blocking"},
        {"benchmark": "agent", "metric": "import agent", "value": _import_time_s() * 1000, "unit": "ms",
         "note": "fresh interpreter, best of 3"},
    ]
