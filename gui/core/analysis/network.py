"""The links between hosts: bytes all-reduced per step, the transfer time and bandwidth it achieved, and whose link
queues (``gui.core.ingest.transit``): the evidence that makes "the network" a diagnosis rather than a guess.

Per host, over the steady steps of its ranks:

* **bytes per step**: gradient bytes each rank all-reduces per step (the agent's ``bucket_bytes``);
* **transfer time**: per step the *smallest* exposed wait among its ranks, then the median. The last rank to reach
  the all-reduce waits only for the transfer itself, not for anyone, so this is the communication the network
  takes (a lower bound of it when the collective overlaps compute);
* **bus bandwidth**: bytes x 2(N-1)/N / transfer time, the ring all-reduce's traffic per rank per second (the
  convention of NCCL's tests), N the world size;
* **queueing delay**: how long the host's telemetry waited in queues on its way to the collector (p50/p90 over its
  agents' messages). The telemetry leaves through the same NIC as the training's traffic, so a saturated link
  (rate-limited, congested, a bad cable negotiating a low speed) shows up as queueing on that host alone.

``slow_host``: the host whose median queueing delay is at least ``QUEUE_CONGESTED_S`` and ``SLOW_HOST_FACTOR`` times
the largest of the other hosts'. ``congested``: that, or every host queues ``QUEUE_CONGESTED_S`` (the whole fabric
is slow). Without telemetry transit figures (a file of an older version, a single host) ``congested`` is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from gui.core.ingest.transit import Transit
from gui.core.session_data import SessionData

QUEUE_CONGESTED_S: Final[float] = 0.005
"""Median queueing delay of a host's telemetry above which its link counts as queueing (an idle link: < 1 ms)."""
SLOW_HOST_FACTOR: Final[float] = 4.0
"""... and this many times the other hosts' to single that host out."""


@dataclass(frozen=True, slots=True)
class HostLink:
    """One host's link figures (see the module docstring); None where not measured."""

    host: str
    ranks: tuple[int, ...]
    bytes_per_step: float | None
    transfer_s: float | None
    bus_bandwidth_bps: float | None  # bytes per second
    queue_p50_s: float | None
    queue_p90_s: float | None
    messages: int


@dataclass(frozen=True, slots=True)
class NetworkFindings:
    hosts: tuple[HostLink, ...]
    slow_host: str | None
    congested: bool | None

    def host(self, name: str) -> HostLink | None:
        return next((h for h in self.hosts if h.host == name), None)

    def evidence(self) -> str:
        """One sentence: the slow host and its figures, or what the links look like."""
        if self.slow_host is not None:
            slow = self.host(self.slow_host)
            assert slow is not None
            others = [h.queue_p50_s for h in self.hosts if h.host != self.slow_host and h.queue_p50_s is not None]
            return (f"host {slow.host}'s link queues: its telemetry waits {_ms(slow.queue_p50_s)} (p50, "
                    f"p90 {_ms(slow.queue_p90_s)}) against {_ms(max(others) if others else None)} from the other "
                    f"hosts; {_volume(slow)}")
        if self.congested:
            return "every host's link queues (telemetry waits " + ", ".join(
                f"{h.host} {_ms(h.queue_p50_s)}" for h in self.hosts) + ")"
        if self.congested is False:
            return "no link queues (telemetry waits " + ", ".join(f"{h.host} {_ms(h.queue_p50_s)}"
                                                                   for h in self.hosts) + ")"
        return "links not measured"


# ---- Public API ---------------------------------------------------------------------------------------------------


def network_findings(session: SessionData, steady: np.ndarray) -> NetworkFindings:
    """Per-host link figures of a session (``steady``: the steps kept for steady-state figures)."""
    steps = session.steps
    host_of_agent = {h.agent_id: h.host for h in session.agents}
    host_of_rank: dict[int, str] = {}
    for hello in session.agents:
        for rank in hello.ranks:
            host_of_rank.setdefault(int(rank), hello.host)
    transits: dict[str, Transit] = session.counters.get("transit") or {}
    world = max(session.world_size or 0, len(host_of_rank), 1)
    ring = 2 * (world - 1) / world if world > 1 else 0.0
    hosts: list[HostLink] = []
    for host in sorted(set(host_of_rank.values())):
        ranks = tuple(sorted(r for r, h in host_of_rank.items() if h == host))
        mine = steady & np.isin(steps["rank"], ranks)
        bytes_per_step = _median(steps["bucket_bytes"][mine])
        transfer = _smallest_wait_per_step(steps, mine)
        bandwidth = (bytes_per_step * ring / transfer
                     if bytes_per_step and transfer and transfer > 0 and ring > 0 else None)
        merged = Transit()
        for agent_id, transit in transits.items():
            if host_of_agent.get(agent_id) == host:
                merged = merged.merged(transit)
        hosts.append(HostLink(host, ranks, bytes_per_step, transfer, bandwidth, merged.quantile(0.5),
                              merged.quantile(0.9), merged.messages))
    return NetworkFindings(tuple(hosts), *_judge(hosts))


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _judge(hosts: list[HostLink]) -> tuple[str | None, bool | None]:
    measured = [h for h in hosts if h.queue_p50_s is not None]
    if len(hosts) < 2 or len(measured) < len(hosts):
        return None, None
    queues = {h.host: float(h.queue_p50_s or 0.0) for h in measured}
    worst = max(queues, key=queues.__getitem__)
    rest = max(v for k, v in queues.items() if k != worst)
    if queues[worst] >= QUEUE_CONGESTED_S and queues[worst] >= SLOW_HOST_FACTOR * rest:
        return worst, True
    return None, min(queues.values()) >= QUEUE_CONGESTED_S


def _smallest_wait_per_step(steps: dict[str, np.ndarray], mask: np.ndarray) -> float | None:
    wait = steps["comm_exposed_s"][mask]
    index = steps["step"][mask]
    keep = ~np.isnan(wait) & ~np.isnan(index)
    if not keep.any():
        return None
    wait, index = wait[keep], index[keep]
    order = np.lexsort((wait, index))  # by step, smallest wait first
    first = np.r_[True, index[order][1:] != index[order][:-1]]
    return float(np.median(wait[order][first]))


def _median(values: np.ndarray) -> float | None:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else None


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _volume(link: HostLink) -> str:
    if link.bytes_per_step is None:
        return "bytes per step not measured"
    text = f"{link.bytes_per_step / 1e3:,.1f} kB all-reduced per step per rank"
    if link.bus_bandwidth_bps is not None and link.transfer_s is not None:
        text += (f", {_ms(link.transfer_s)} of transfer per step: "
                 f"{link.bus_bandwidth_bps * 8 / 1e6:,.2f} Mbit/s effective bus bandwidth")
    return text
