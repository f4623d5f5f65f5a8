"""The agents' clocks on the collector's: each agent's offset, from the smallest transit of its messages, and moving
its timestamps by it. Hosts not kept in step by NTP otherwise put one step at different times on different ranks.

Two users: the reader (``session_reader.load``) aligns a whole recording with ``clock_offsets`` and ``align_clocks``
(from the ``transit`` figures the recorder kept, ``transit.Transit``); the live runs (``ringscope.gui.core.live``)
align batches as they arrive with ``ClockAligner``, by the same rule as it stands so far. The file always keeps what
the agents sent.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Final

import numpy as np

from ringscope.agent.schema import shifted
from ringscope.gui.core.ingest.transit import Transit
from ringscope.gui.core.session_data import SessionData

CLOCK_ALIGN_MIN_S: Final[float] = 0.010
"""Clocks are aligned only where an agent's smallest transit is at least this far from 0: below it the estimate
cannot tell a clock offset from the path's own delay (sub-millisecond on a LAN; a message's serialization on a slow
link), and hosts kept in step by NTP are better left as they are."""

SAME_CLOCK_TOLERANCE_S: Final[float] = 0.005
"""An agent whose boot time (its wall clock minus its monotonic clock, both in its Hello) matches the collector's
within this reads the collector's own kernel clock (same machine, or a container on it); a host booted at another
instant, or a clock stepped since, differs by far more."""

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
        self._same: set[str] = set()  # agents on the collector's own clock (``note_hello``)

    def note_hello(self, agent_id: str, hello: Any) -> None:
        """Learn from an agent's Hello whether it reads the collector's own clock. Such an agent's offset is 0
        whatever its transits say: a collector that falls behind (a join storm of thousands of ranks) reads every
        message late, and the smallest transit so far would take that backlog for a clock offset."""
        boot_there = hello.clock_wall_s - hello.clock_mono_s
        boot_here = time.time() - time.monotonic()
        if abs(boot_there - boot_here) < SAME_CLOCK_TOLERANCE_S:
            self._same.add(agent_id)
        else:
            self._same.discard(agent_id)

    def offset(self, agent_id: str) -> float:
        if agent_id in self._same:
            return 0.0
        return self._min.get(agent_id, 0.0) if abs(self._min.get(agent_id, 0.0)) >= CLOCK_ALIGN_MIN_S else 0.0

    def align(self, batch: Any, recv_s: float) -> Any:
        transit = recv_s - batch.sent_s
        known = self._min.get(batch.agent_id)
        if known is None or transit < known:
            self._min[batch.agent_id] = transit
        offset = self.offset(batch.agent_id)
        return dataclasses.replace(batch, records=[shifted(r, offset) for r in batch.records]) if offset else batch
