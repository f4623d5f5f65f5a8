"""Overhead of the zero-code path (``ringscope run``) against the manual API on the peer DDP workload.

    .venv/bin/python tests/integration/scripts/zero_code_overhead.py [--pairs 4] [--steps 3000]
    .venv/bin/python tests/integration/scripts/zero_code_overhead.py --alternating [--rounds 12]

Runs ``peer_ddp.py`` on 2 gloo ranks as: plain (no Ringscope), manual (``instrument``), zero-code (``ringscope
run``), in ABBA order (zero-code/manual pairs interleaved, the plain floor once per pair) against a real ROUTER
collector, and prints each run's median step (wall) and CPU per step, and the median ratios zero-code / manual with
their range. On a shared 2-core machine the wall figure swings with other load; CPU per step is the steadier one.

``--alternating`` runs ``peer_ddp_alternating.py`` once under ``ringscope run`` instead: zero-code, manual and plain
models take turns in the same two rank processes (a few hundred steps each, order rotating), so machine load
drifting between runs cancels out; it prints the per-round ratios' median and range.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import zmq

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def collector() -> str:
    context = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def drain() -> None:
        while True:
            sock.recv_multipart()[-1]

    threading.Thread(target=drain, daemon=True).start()
    return f"tcp://127.0.0.1:{port}"


def run(variant: str, endpoint: str, steps: int) -> tuple[float, float]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
                str(HERE / "peer_ddp.py"), "--steps", str(steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1", RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID=f"overhead-{variant}")
    if variant == "manual":
        argv = [*torchrun, "--manual"]
    elif variant == "zero-code":
        argv = [sys.executable, "-m", "ringscope.gui.cli", "run", "--endpoint", endpoint, "--", *torchrun]
    else:
        argv = torchrun
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=True)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("MEDIAN_STEP_MS")]
    words = line.split()
    return float(words[1]), float(words[3])


def alternating(endpoint: str, rounds: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "ringscope.gui.cli", "run", "--endpoint", endpoint, "--run-id",
            "overhead-alternating", "--",
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
            str(HERE / "peer_ddp_alternating.py"), "--rounds", str(rounds)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=True)
    rows = [[float(v) for v in line.split()[1:]] for line in done.stdout.splitlines() if line.startswith("ROUND ")]
    for row in rows:
        print(f"round: zero-code {row[0]:.3f} ms, manual {row[1]:.3f} ms, plain {row[2]:.3f} ms")
    for name, ratios in (("zero-code / manual", [r[0] / r[1] for r in rows]),
                         ("manual / plain", [r[1] / r[2] for r in rows]),
                         ("zero-code / plain", [r[0] / r[2] for r in rows])):
        print(f"{name}: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f} "
              f"over {len(ratios)} rounds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--alternating", action="store_true")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    endpoint = collector()
    if args.alternating:
        alternating(endpoint, args.rounds)
        return
    wall: list[float] = []
    cpu: list[float] = []
    floor: list[float] = []
    for pair in range(args.pairs):
        order = ["zero-code", "manual"] if pair % 2 == 0 else ["manual", "zero-code"]
        ms = {variant: run(variant, endpoint, args.steps) for variant in order}
        ms["plain"] = run("plain", endpoint, args.steps)
        wall.append(ms["zero-code"][0] / ms["manual"][0])
        cpu.append(ms["zero-code"][1] / ms["manual"][1])
        floor.append(ms["manual"][1] / ms["plain"][1])
        print(f"pair {pair}: " + ", ".join(f"{k} {v[0]:.3f} ms wall / {v[1]:.3f} ms CPU" for k, v in ms.items())
              + f"; zero-code/manual wall {wall[-1]:.3f}, CPU {cpu[-1]:.3f}", flush=True)
    for name, ratios in (("wall", wall), ("CPU per step", cpu)):
        print(f"zero-code / manual, {name}: median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} pairs")
    print(f"manual / plain, CPU per step: median {statistics.median(floor):.3f}")

if __name__ == "__main__":
    main()
