"""Recovery: how long a hung run's GPUs wait for the next attempt, and the goodput of the recovered run.

    python -m benchmarks restart

A real 2-rank torchrun/gloo job (the reference DDP trainer, CPU, checkpoint every 20 steps, ``--resume-latest``)
under ``ringscope run --restart hang,failure,lost``, recorded by a real ``ringscope record``: rank 1 blocks forever
at step 50 in attempt 1 and is SIGKILLed at step 120 in attempt 2. Reported from ``ringscope info``: the time from
the hang verdict to the first step of attempt 2 (target <= 15 s on this machine: evidence, stop, 1 s delay,
torchrun and torch start-up, rendezvous, checkpoint restore), from the failure to attempt 3's first step, and the
run's goodput with its largest causes. Median and range over the repeats (1 quick, 3 full).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ringscope.trainers.common import free_port

BIN = Path(sys.executable).parent


def _once(folder: Path) -> dict[str, Any]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    session = folder / "session.db"
    recorder = subprocess.Popen([str(BIN / "ringscope"), "record", "--out", str(session), "--bind", endpoint,
                                 "--progress-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        command = [str(BIN / "torchrun"), "--nproc-per-node", "2", "-m", "ringscope.trainers.ddp_trainer", "--device",
                   "cpu", "--steps", "200", "--checkpoint-dir", str(folder / "ck"), "--checkpoint-every-steps", "20",
                   "--resume-latest", "--log-every", "0", "--fault", "hang:1:50:1", "--fault", "kill:1:120:2"]
        done = subprocess.run([str(BIN / "ringscope"), "run", "--endpoint", endpoint, "--restart", "hang,failure,lost",
                               "--max-restarts", "3", "--", *command], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, RINGSCOPE_RUN_ID="bench-restart"))
        if done.returncode != 0:
            raise RuntimeError(f"the restarted run exited {done.returncode}: {done.stderr[-1500:]}")
        time.sleep(1.0)
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)
    info = json.loads(subprocess.run([str(BIN / "ringscope"), "info", str(session)], capture_output=True, text=True,
                                     check=True, timeout=120).stdout)
    run = info["runs"][0]
    attempts = run["attempts"]
    return {"hang_to_step": attempts[1]["first_step_s"] - attempts[0]["hang_detected_s"],
            "failure_to_step": attempts[2]["first_step_s"] - attempts[1]["end_s"],
            "goodput": run["goodput"], "attempts": len(attempts)}


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Rows for the benchmark table."""
    results = []
    for _ in range(1 if quick else 3):
        with tempfile.TemporaryDirectory(prefix="ringscope-bench-restart-") as folder:
            results.append(_once(Path(folder)))
    hang = [r["hang_to_step"] for r in results]
    failure = [r["failure_to_step"] for r in results]
    ratio = [r["goodput"]["ratio"] for r in results]
    causes = results[-1]["goodput"]["causes"]
    biggest = sorted(causes, key=lambda c: -(causes[c]["seconds"] or 0))[:3]
    spread = f"{len(results)} run(s), range {min(hang):.1f}–{max(hang):.1f} s"
    return [
        {"benchmark": "restart", "metric": "hang verdict -> first step of the next attempt", "value":
            statistics.median(hang), "unit": "s", "note": f"target <= 15 s; {spread}"},
        {"benchmark": "restart", "metric": "failure (rank SIGKILLed) -> first step of the next attempt", "value":
            statistics.median(failure), "unit": "s", "note": f"range {min(failure):.1f}–{max(failure):.1f} s"},
        {"benchmark": "restart", "metric": "goodput of the recovered 200-step toy run", "value":
            statistics.median(ratio), "unit": "ratio",
         "note": "largest causes: " + ", ".join(f"{c} {causes[c]['share']:.0%}" for c in biggest)},
    ]
