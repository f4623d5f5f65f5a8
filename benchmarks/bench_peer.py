"""What the agent costs on the peer DDP workload (a ~1 ms step, where a fixed per-step cost shows most).

    python -m benchmarks peer

``peer_workload.py`` (the PyTorch examples' DDP tutorial on CPU/gloo: ``nn.Linear(20, 1)``, batch 32, 262 144
samples, SGD, DistributedSampler; 2 ranks under torchrun) trains a plain and an instrumented copy of the model in the
same processes, taking turns every ``--phase-steps`` steps in ABBA order. Two runs:

* **agent alone**: the agent's endpoint has no collector (its records wait, bounded, and are dropped and counted);
* **agent + recorder**: ``ringscope record`` runs on the same machine and writes every record to a session file;
  it asks the agents to send every 0.25 s (``--agent-flush``, its default); a third light-timing run keeps the
  agents' own 50 ms flush (``--agent-flush 0``), so the flush's share is measured in the same run.

Per run: the median over rounds of (agent's median step / plain's median step) with its range, and the training
thread's extra CPU per step (median over rounds of agent − plain ``thread_time`` per step). Targets (issue 12):
≤ ×1.01 alone, ≤ ×1.05 with the recorder (issue 29), ≤ 5 µs of training-thread time per step.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ringscope.trainers.common import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run(quick: bool = False) -> list[dict[str, Any]]:
    rounds, steps = (4, 300) if quick else (10, 600)
    rows: list[dict[str, Any]] = []
    for timing in ("light", "full") if not quick else ("light",):
        rows += _condition("agent alone", timing, rounds, steps, recorder=False)
        rows += _condition("agent + recorder", timing, rounds, steps, recorder=True)
        if timing == "light":
            rows += _condition("agent + recorder, agents' own 50 ms flush", timing, rounds, steps, recorder=True,
                               agent_flush=0.0)
    # one rank alone: no gloo peer spinning on the other core, so the training thread's CPU time is its own work
    rows += _condition("one rank, agent alone", "light", rounds * 2, steps * 2, recorder=False, ranks=1)[1:]
    return rows


def _condition(name: str, timing: str, rounds: int, steps: int, *, recorder: bool,
               ranks: int = 2, agent_flush: float | None = None) -> list[dict[str, Any]]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as folder:
        record = None
        if recorder:
            record = subprocess.Popen(
                [sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(Path(folder) / "peer.db"),
                 "--bind", endpoint, "--progress-s", "0",
                 *(["--agent-flush", str(agent_flush)] if agent_flush is not None else [])],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(2.0)  # listening before the ranks start (they would connect later anyway)
        started = time.monotonic()
        recorder_cpu_s = None
        try:
            lines = _torchrun(endpoint, timing, rounds, steps, ranks)
        finally:
            if record is not None:
                recorder_cpu_s = _cpu_seconds(record.pid)
                record.terminate()
                record.wait(timeout=60)
    wall_s = time.monotonic() - started
    figures = [[float(v) for v in line.split()[1:]] for line in lines if line.startswith("ROUND ")]
    agent_line = next((line for line in lines if line.startswith("AGENT ")), "AGENT ?")
    if not figures:
        raise RuntimeError("the peer workload printed no ROUND lines:\n" + "\n".join(lines[-20:]))
    ratios = [agent / plain for plain, agent, _, _ in figures]
    extra_us = [agent_us - plain_us for _, _, plain_us, agent_us in figures]
    plain_ms = statistics.median(f[0] for f in figures)
    target = 1.05 if recorder else 1.01
    label = f"{name} ({timing} timing)"
    note = (f"{len(figures)} ABBA rounds x {steps} steps per model, {ranks} gloo rank(s); "
            f"plain step {plain_ms:.3f} ms; "
            f"range x{min(ratios):.3f}-x{max(ratios):.3f}; {agent_line.lower()}")
    if recorder_cpu_s is not None:  # what the co-located recorder took from the two cores the ranks share
        share = 100 * recorder_cpu_s / wall_s
        note += f"; recorder CPU {recorder_cpu_s:.1f} s of {wall_s:.0f} s ({share:.1f} % of one core)"
    return [
        {"benchmark": "peer", "metric": f"{label}: step ratio (agent / plain)", "value": statistics.median(ratios),
         "unit": "x", "note": f"{note}; target <= x{target}"},
        {"benchmark": "peer", "metric": f"{label}: training-thread CPU per step", "value": statistics.median(extra_us),
         "unit": "µs", "note": f"agent - plain thread_time per step, median over rounds (range "
                               f"{min(extra_us):.1f}-{max(extra_us):.1f}); target <= 5 µs"},
    ]


def _torchrun(endpoint: str, timing: str, rounds: int, steps: int, ranks: int) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
            str(free_port()), str(HERE / "peer_workload.py"), "--rounds", str(rounds), "--phase-steps", str(steps),
            "--timing", timing]
    env = dict(os.environ, OMP_NUM_THREADS="1", RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID=f"peer-{timing}",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout.splitlines()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
