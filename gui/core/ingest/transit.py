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
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import shifted
from ringscope.gui.core.session_data import SessionData

BIN_EDGES_S: Final[tuple[float, ...]] = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                                         2.0, 5.0)
"""Upper edges of the queueing-delay bins (seconds); a last bin holds everything above 5 s."""

CREATE: Final[str] = ("CREATE TABLE IF NOT EXISTS transit (agent_id TEXT PRIMARY KEY, messages INTEGER, "
                      "min_transit_s REAL, queue_hist TEXT)")
INSERT: Final[str] = ("INSERT OR REPLACE INTO transit(agent_id, messages, min_transit_s, queue_hist) "
                      "VALUES (?, ?, ?, ?)")


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


CLOCK_ALIGN_MIN_S: Final[float] = 0.010
"""Clocks are aligned only where an agent's smallest transit is at least this far from 0: below it the estimate
cannot tell a clock offset from the path's own delay (sub-millisecond on a LAN; a message's serialization on a slow
link), and hosts kept in step by NTP are better left as they are."""

TIME_COLUMNS: Final[dict[str, tuple[str, ...]]] = {"steps": ("start_s", "end_s"), "gpu": ("ts_s",),
                                                   "host": ("ts_s",), "health": ("ts_s",)}


def clock_offsets(transits: dict[str, Transit]) -> dict[str, float]:
    """Seconds to add to each agent's timestamps to put them on the collector's clock, for agents whose clock is off
    by at least ``CLOCK_ALIGN_MIN_S``.

    The smallest transit an agent's messages took (collector receipt - agent send time) is its clock's offset plus
    the path's one-way fixed delay; on a LAN that delay is well under a millisecond, so aligned times agree across
    hosts to about that. (An NTP-style round trip over the reply path would also remove the one-way delay; the
    one-way minimum needs no round trip and costs nothing on the training side.)
    """
    return {agent_id: t.min_transit_s for agent_id, t in transits.items()
            if t.messages and math.isfinite(t.min_transit_s) and abs(t.min_transit_s) >= CLOCK_ALIGN_MIN_S}


def align_clocks(data: SessionData, offsets: dict[str, float]) -> None:
    """Shift the timestamps of ``data`` (steps, device samples, health, events, identities) sent by the agents in
    ``offsets`` onto the collector's clock, in place; the file keeps what the agents sent."""
    if not offsets:
        return
    for name, fields in TIME_COLUMNS.items():
        columns = getattr(data, name)
        agents = columns.get("agent_id")
        if agents is None or not len(agents):
            continue
        shift = np.zeros(len(agents))
        for agent_id, offset in offsets.items():
            shift[agents == agent_id] = offset
        if shift.any():
            for field_name in fields:  # new arrays: a column may be a read-only view of the file's blocks
                columns[field_name] = columns[field_name] + shift
    for index, (event, agent_id) in enumerate(zip(data.events, data.event_agents, strict=False)):
        if agent_id in offsets:
            data.events[index] = shifted(event, offsets[agent_id])
    order = sorted(range(len(data.events)), key=lambda i: data.events[i].ts_s)
    data.events[:] = [data.events[i] for i in order]
    if len(data.event_agents) == len(order):
        data.event_agents[:] = [data.event_agents[i] for i in order]
    data.agents[:] = [shifted(h, offsets[h.agent_id]) if h.agent_id in offsets else h for h in data.agents]
    data.counters["clock_offsets"] = dict(offsets)


class ClockAligner:
    """Live alignment: per agent the smallest transit so far, and batches moved onto the collector's clock once it
    says the agent's clock is off by ``CLOCK_ALIGN_MIN_S`` or more (``clock_offsets``' rule, as it stands now).
    Used on the collector's thread only."""

    def __init__(self) -> None:
        self._min: dict[str, float] = {}

    def offset(self, agent_id: str) -> float:
        return self._min.get(agent_id, 0.0) if abs(self._min.get(agent_id, 0.0)) >= CLOCK_ALIGN_MIN_S else 0.0

    def align(self, batch: Any, recv_s: float) -> Any:
        transit = recv_s - batch.sent_s
        known = self._min.get(batch.agent_id)
        if known is None or transit < known:
            self._min[batch.agent_id] = transit
        offset = self.offset(batch.agent_id)
        return dataclasses.replace(batch, records=[shifted(r, offset) for r in batch.records]) if offset else batch


class TransitTracker:
    """Per agent ``Transit``, fed on the recorder's writer thread; rows for the ``transit`` table."""

    def __init__(self) -> None:
        self._agents: dict[str, Transit] = {}

    def observe(self, agent_id: str, sent_s: float, recv_s: float) -> None:
        transit = self._agents.get(agent_id)
        if transit is None:
            transit = self._agents[agent_id] = Transit()
        transit.observe(sent_s, recv_s)

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
