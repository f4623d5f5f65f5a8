"""The reply path: how fast stacks come back, and what a collector crash costs now that delivery is acknowledged.

    python -m benchmarks control

* ``ringscope stacks`` latency (request to folded answer) against a real collector, for 2 and 256 simulated ranks
  (``ringscope simulate``: real agents in their own processes), median of 5 requests;
* reliability: a real ``ringscope record`` is SIGKILLed while 2 real agents stream 1 000 steps/s each, and a new one
  starts on the same endpoint 2 s later. Reported: steps lost (in neither file), duplicate rows inside either file,
  and steps in both files (committed by the dead collector but not yet acknowledged to the agents).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ringscope.agent import runtime
from ringscope.gui.core.analysis.stacks import fold
from ringscope.gui.core.ingest.ask import ask
from ringscope.gui.core.ingest.collector import Collector


def _cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", *args], text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)


def _stacks_latency(ranks: int, requests: int) -> tuple[float, float, int]:
    """Median and max seconds of ``requests`` stack requests to a run of ``ranks`` simulated ranks; ranks answered."""
    collector = Collector("tcp://127.0.0.1:0", []).start()
    run_id = f"bench-stacks-{ranks}"
    simulation = _cli("simulate", "--ranks", str(ranks), "--endpoint", collector.endpoint, "--duration", "120",
                      "--steps-per-second", "2", "--run-id", run_id)
    try:
        deadline = time.monotonic() + 60
        result: dict[str, Any] = {}
        while time.monotonic() < deadline:  # until every rank's agent is known
            try:
                result = ask(collector.endpoint, "stacks", run_id=run_id, wait_s=5.0)
                if fold(result).ranks >= ranks:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        took = []
        for _ in range(requests):
            started = time.monotonic()
            result = ask(collector.endpoint, "stacks", run_id=run_id, wait_s=5.0)
            took.append(time.monotonic() - started)
        return statistics.median(took), max(took), sum(1 for r in result["ranks"] if r.get("answered"))
    finally:
        simulation.send_signal(signal.SIGINT)
        simulation.wait(30)
        collector.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _restart(steps_per_s: float = 1000.0) -> dict[str, int]:
    folder = Path(tempfile.mkdtemp(prefix="ringscope-bench-restart-"))
    bind = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    first = _cli("record", "--out", str(folder / "a.db"), "--bind", bind, "--progress-s", "0", env=env)
    time.sleep(2.0)
    agents = [runtime.start(framework="other", strategy="ddp", rank=r, world_size=2, endpoint=bind, run_id="restart",
                            sample_devices=False) for r in range(2)]
    stop = threading.Event()
    sent = [0]

    def stream() -> None:
        while not stop.is_set():
            now = time.time()
            for rank, agent in enumerate(agents):
                agent.step(rank, sent[0], now, now + 0.001)
            sent[0] += 1
            time.sleep(1.0 / steps_per_s)

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    time.sleep(3.0)
    first.kill()  # SIGKILL while the agents stream
    first.wait(10)
    time.sleep(2.0)
    second = _cli("record", "--out", str(folder / "b.db"), "--bind", bind, "--progress-s", "0", env=env)
    time.sleep(4.0)
    stop.set()
    thread.join(10)
    for agent in agents:
        agent.close(5.0)
    time.sleep(1.0)
    second.send_signal(signal.SIGINT)
    second.wait(60)
    seen: Counter[tuple[int, int]] = Counter()
    duplicates = 0
    for name in ("a.db", "b.db"):
        with sqlite3.connect(folder / name) as connection:
            rows = Counter(connection.execute("SELECT rank, step FROM step").fetchall())
        duplicates += sum(count - 1 for count in rows.values())
        seen.update(rows.keys())
    expected = {(rank, step) for rank in range(2) for step in range(sent[0])}
    return {"sent": len(expected), "lost": len(expected - set(seen)), "duplicates": duplicates,
            "in_both": sum(1 for count in seen.values() if count > 1)}


def run(quick: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for ranks in (2, 256):
        median, worst, answered = _stacks_latency(ranks, 3 if quick else 5)
        rows.append({"benchmark": "control", "metric": f"stacks latency, {ranks} ranks (median)", "value": median,
                     "unit": "s", "note": f"max {worst:.2f} s; {answered} of {ranks} ranks answered; target "
                                          f"{'2' if ranks == 2 else '5'} s"})
    restart = _restart()
    rows.append({"benchmark": "control", "metric": "collector SIGKILL + restart: steps lost", "value": restart["lost"],
                 "unit": "steps", "note": f"of {restart['sent']} sent by 2 agents at 1 000 steps/s; down 2 s"})
    rows.append({"benchmark": "control", "metric": "collector SIGKILL + restart: duplicate rows in a file",
                 "value": restart["duplicates"], "unit": "rows", "note": "collectors drop messages sent twice"})
    rows.append({"benchmark": "control", "metric": "collector SIGKILL + restart: steps in both files",
                 "value": restart["in_both"], "unit": "steps",
                 "note": "committed by the killed collector, not yet acknowledged (acks every 0.25 s)"})
    return rows
