"""The links between hosts: bytes all-reduced per step, the transfer time and bandwidth it achieved, and whose link
queues (``ringscope.gui.core.ingest.transit``): the evidence that makes "the network" a diagnosis rather than a guess.

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

import itertools
from dataclasses import dataclass
from typing import Final

import numpy as np

from ringscope.gui.core.analysis.quantiles import median_or_none
from ringscope.gui.core.ingest.transit import Transit
from ringscope.gui.core.session_data import SessionData

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
    """Per-host link figures of a session (``steady``: the steps kept for steady-state figures).

    One sort of the steady steps by (host, step, wait) serves every host: a whole-session analysis runs every few
    seconds in the window, and a 1 h x 256-rank session has 1.8 M steps on 32 hosts."""
    steps = session.steps
    host_of_agent = {h.agent_id: h.host for h in session.agents}
    host_of_rank: dict[int, str] = {}
    for hello in session.agents:
        for rank in hello.ranks:
            host_of_rank.setdefault(int(rank), hello.host)
    names = sorted(set(host_of_rank.values()))
    transits: dict[str, Transit] = session.counters.get("transit") or {}
    world = max(session.world_size or 0, len(host_of_rank), 1)
    ring = 2 * (world - 1) / world if world > 1 else 0.0
    bytes_of, transfer_of = _per_host_columns(steps, steady, host_of_rank, names)
    merged = {name: Transit() for name in names}
    for agent_id, transit in transits.items():
        host = host_of_agent.get(agent_id)
        if host in merged:
            merged[host] = merged[host].merged(transit)
    ranks_of: dict[str, list[int]] = {name: [] for name in names}
    for rank, host in sorted(host_of_rank.items()):
        ranks_of[host].append(rank)
    hosts: list[HostLink] = []
    for index, host in enumerate(names):
        ranks = tuple(ranks_of[host])
        bytes_per_step, transfer = bytes_of[index], transfer_of[index]
        bandwidth = (bytes_per_step * ring / transfer
                     if bytes_per_step and transfer and transfer > 0 and ring > 0 else None)
        hosts.append(HostLink(host, ranks, bytes_per_step, transfer, bandwidth, merged[host].quantile(0.5),
                              merged[host].quantile(0.9), merged[host].messages))
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


def _per_host_columns(steps: dict[str, np.ndarray], steady: np.ndarray, host_of_rank: dict[int, str],
                      names: list[str]) -> tuple[list[float | None], list[float | None]]:
    """Per host (in ``names`` order): the median bytes per step, and the median over steps of the smallest
    exposed wait among its ranks."""
    empty: list[float | None] = [None] * len(names)
    if not names or not steady.any():
        return empty, list(empty)
    known = np.array(sorted(host_of_rank), dtype=np.float64)
    position = {name: i for i, name in enumerate(names)}
    host_index = np.array([position[host_of_rank[int(r)]] for r in known], dtype=np.int64)
    rank = steps["rank"][steady]
    slot = np.searchsorted(known, rank)
    found = (slot < len(known)) & (known[np.minimum(slot, len(known) - 1)] == rank)
    host = host_index[np.minimum(slot, len(known) - 1)][found]
    wait, step = steps["comm_exposed_s"][steady][found], steps["step"][steady][found]
    size = steps["bucket_bytes"][steady][found]
    numbered = ~np.isnan(step)
    host, wait, size, step = host[numbered], wait[numbered], size[numbered], step[numbered].astype(np.int64)
    if not len(step):
        return empty, list(empty)
    # one integer key per (host, step), one sort: each host is a slice, each of its steps a run within it
    span = int(step.max() - step.min()) + 1
    key = host * span + (step - step.min())
    order = np.argsort(key)
    key = key[order]
    bounds = np.searchsorted(key // span, np.arange(len(names) + 1))
    size = size[order]
    bytes_of = [median_or_none(size[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    smallest = np.fmin.reduceat(wait[order], starts)  # each (host, step)'s smallest wait (NaN only if all are)
    group_bounds = np.searchsorted(key[starts] // span, np.arange(len(names) + 1))
    transfer_of = [median_or_none(smallest[lo:hi]) for lo, hi in itertools.pairwise(group_bounds)]
    return bytes_of, transfer_of


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
