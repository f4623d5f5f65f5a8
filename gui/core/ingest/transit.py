"""How long each agent's messages spend on the way: the queueing delay of its link, kept per agent in the session.

Every message carries the agent's send time (``wire.Batch.sent_s``); the collector stamps its arrival. Their
difference is the clock offset between the two hosts plus the path's fixed delay plus *queueing*; the smallest
difference seen from an agent is offset + fixed delay, so ``transit - min transit`` is the time its messages waited in
queues, whatever the clocks say. A link saturated by a training's all-reduce traffic (a rate-limited or congested
NIC) queues the telemetry behind it: its agents' queueing delay grows, and the host whose delay stands out is the one
with the slow link (``ringscope.gui.core.analysis.network``).

Kept as a small histogram per agent (``BIN_EDGES_S``), rewritten by the recorder in the ``transit`` table every
``TRANSIT_WRITE_S`` (2 s) and at close, so the cost is a few operations per message and a row per agent every
2 s, never a row per message. The first messages of an agent are judged against the smallest transit seen so
far; an agent's hello and first records go out before the training loads its link, so the minimum is found early.
The same smallest transit is each agent's clock offset: ``clocks`` aligns the hosts' clocks by it.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Final

BIN_EDGES_S: Final[tuple[float, ...]] = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                                         2.0, 5.0)
"""Upper edges of the queueing-delay bins (seconds); a last bin holds everything above 5 s."""


@dataclass(slots=True)
class Transit:
    """One agent's messages: how many, the smallest transit (offset + fixed delay) and the queueing histogram."""

    messages: int = 0
    min_transit_s: float = float("inf")
    counts: list[int] = field(default_factory=lambda: [0] * (len(BIN_EDGES_S) + 1))

    def observe(self, sent_s: float, recv_s: float) -> None:
        transit = recv_s - sent_s
        if transit < self.min_transit_s:
            self.min_transit_s = transit
        self.messages += 1
        self.counts[bisect.bisect_left(BIN_EDGES_S, transit - self.min_transit_s)] += 1

    def merged(self, other: Transit) -> Transit:
        """Both agents' histograms together (the minimum is not comparable across hosts and is dropped)."""
        return Transit(self.messages + other.messages, float("nan"),
                       [a + b for a, b in zip(self.counts, other.counts, strict=True)])

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the queueing delay (seconds), interpolated within its bin; None without messages."""
        total = sum(self.counts)
        if total == 0:
            return None
        target = q * total
        seen = 0
        for index, count in enumerate(self.counts):
            if count and seen + count >= target:
                low = BIN_EDGES_S[index - 1] if index > 0 else 0.0
                high = BIN_EDGES_S[index] if index < len(BIN_EDGES_S) else BIN_EDGES_S[-1] * 2
                return low + (high - low) * max(0.0, target - seen) / count
            seen += count
        return BIN_EDGES_S[-1] * 2


class TransitTracker:
    """Per agent ``Transit``: fed on the recorder's writer thread (rows for the ``transit`` table) and by each live
    store (its run's agents, for the live network analysis)."""

    def __init__(self) -> None:
        self._agents: dict[str, Transit] = {}

    def resume(self, recorded: dict[str, Transit]) -> None:
        """Continue the figures a previous writer of the same file left (``load``), so a reopened session's rows
        keep counting from there instead of replacing them with the new segment's messages only."""
        self._agents.update(recorded)

    def observe(self, agent_id: str, sent_s: float, recv_s: float) -> None:
        transit = self._agents.get(agent_id)
        if transit is None:
            transit = self._agents[agent_id] = Transit()
        transit.observe(sent_s, recv_s)

    def snapshot(self) -> dict[str, Transit]:
        """Copies of every agent's figures (``SessionData.counters["transit"]``, what the network analysis reads)."""
        return {agent_id: Transit(t.messages, t.min_transit_s, list(t.counts)) for agent_id, t in self._agents.items()}

    def rows(self, agent_ids: set[str]) -> list[tuple[str, int, float, str]]:
        """``transit`` rows (INSERT OR REPLACE) of the agents heard from since the last write."""
        return [(agent_id, t.messages, t.min_transit_s, json.dumps(t.counts))
                for agent_id in agent_ids if (t := self._agents.get(agent_id)) is not None and t.messages]


def load(connection: sqlite3.Connection) -> dict[str, Transit]:
    """Every agent's ``Transit`` from a session file; empty for files written before the table existed."""
    try:
        rows = connection.execute("SELECT agent_id, messages, min_transit_s, queue_hist FROM transit").fetchall()
    except sqlite3.OperationalError:  # no such table: an older file
        return {}
    found: dict[str, Transit] = {}
    for agent_id, messages, min_s, hist in rows:
        try:
            counts = [int(c) for c in json.loads(hist)]
        except (TypeError, ValueError):
            continue  # a damaged row costs that agent's figure only
        if len(counts) == len(BIN_EDGES_S) + 1:
            found[str(agent_id)] = Transit(int(messages), float(min_s), counts)
    return found
