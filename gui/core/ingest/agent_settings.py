"""What a collector asks each agent to set when its Hello arrives (sent once per agent over the reply path; the
agents' answers are recorded): the collector's own ``agent_settings`` (a headless recorder's longer flush), and a
flush interval that grows with the run's size.

What it must never do: ask for a value the agents would refuse (``control.check_settings``' bounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ringscope.agent import control
from ringscope.agent.schema import Hello

SCALED_FLUSH_FROM_AGENTS: Final[int] = 512
"""A run of this many agents or more (its Hello's world size over the ranks each agent reports for: one agent per
DDP rank) is asked to flush less often, ``scaled_flush_s``: every agent flushing every 50 ms is ~20 messages a second
each, and at ~85 µs a message 1 024 one-rank agents would need ~1.7 of a collector's cores; the records then wait
longer on the agents instead of piling up, unbounded, in the collector's queue."""
SCALED_FLUSH_PER_AGENT_S: Final[float] = 0.05 / 256  # 512 agents 0.1 s, 1 024 0.2 s, 2 048 0.4 s, 5 120+ 1 s


def scaled_flush_s(world_size: int, ranks_per_agent: int) -> float | None:
    """The flush interval an agent of a run this size is asked for (None: small enough for the agents' own); see
    ``SCALED_FLUSH_FROM_AGENTS``. Costs latency: a record waits up to this long on its agent (half of it on average)."""
    agents = -(-max(int(world_size), 0) // max(int(ranks_per_agent), 1))
    if agents < SCALED_FLUSH_FROM_AGENTS:
        return None
    high = float(control.SETTINGS["flush_interval_s"][2])  # type: ignore[arg-type]
    return round(min(high, SCALED_FLUSH_PER_AGENT_S * agents), 3)


def agent_settings_for(base: Mapping[str, object] | None, hello: Hello) -> dict[str, object]:
    """What the agent of ``hello`` is asked to set: ``base`` (the collector's checked ``agent_settings``), with a
    flush interval of at least ``scaled_flush_s`` of its run's size. Empty: nothing to send."""
    settings = dict(base or {})
    flush = scaled_flush_s(hello.world_size, len(hello.ranks or ()) or 1)
    if flush is not None and flush > float(settings.get("flush_interval_s", 0.0) or 0.0):  # type: ignore[arg-type]
        settings["flush_interval_s"] = flush
    return settings
