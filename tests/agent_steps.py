"""Steps from real agents, one per rank and step, a few ms apart: shared by the tests of the ingest process and of
the window over it (``agents[r]`` reports rank ``r``)."""

from __future__ import annotations

import time

from ringscope import agent


def send_steps(agents: list[agent.Agent], first: int, count: int) -> None:
    """Steps ``first`` .. ``first + count - 1`` of every agent's rank, with fixed phases (10 ms steps)."""
    for k in range(first, first + count):
        now = time.time()
        for r, a in enumerate(agents):
            a.step(r, k, now - 0.01, now, data_wait_s=0.001, compute_s=0.005, comm_s=0.003, comm_exposed_s=0.002)
        time.sleep(0.005)
