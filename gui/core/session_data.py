"""One in-memory shape for a session, whether it comes from the live store or from a recorded SQLite file.

Analysis, reports and comparison take a ``SessionData`` and never care where it came from. Columns are derived
from ``agent.schema.FIELDS``: numeric fields become float64 arrays with NaN for a missing reading (never 0),
text and list fields become object arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.schema import FIELDS, Event, Hello

Columns = dict[str, np.ndarray]


def empty_columns(kind: str) -> Columns:
    """Zero-length columns for a record kind."""
    return columns_from_rows(kind, [])


def columns_from_rows(kind: str, rows: Sequence[Sequence[Any]]) -> Columns:
    """Turn rows of field values (schema order) into columns. Missing numeric readings become NaN."""
    specs = FIELDS[kind]
    out: Columns = {}
    for index, spec in enumerate(specs):
        values = [row[index] for row in rows]
        if spec.sql_type in ("REAL", "INTEGER"):
            out[spec.name] = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
        else:
            out[spec.name] = np.array(values, dtype=object)
    return out


@dataclass(slots=True)
class SessionData:
    """A whole session (or the live window of one) as columns.

    Attributes:
        agents: one identity record per agent (process) seen.
        steps / gpu / host / health: columns keyed by schema field name (see ``agent.schema.FIELDS``), plus
            ``agent_id`` (object) and ``recv_s`` (float64) where the source has them.
        events: every event, in time order.
        counters: ingest counters of the session (messages, rejected by reason, gaps...) as a plain dict.
        source: a file path, or "live".
    """

    agents: list[Hello] = field(default_factory=list)
    steps: Columns = field(default_factory=lambda: empty_columns("step"))
    gpu: Columns = field(default_factory=lambda: empty_columns("gpu"))
    host: Columns = field(default_factory=lambda: empty_columns("host"))
    health: Columns = field(default_factory=lambda: empty_columns("health"))
    events: list[Event] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    source: str = "live"

    @property
    def ranks(self) -> list[int]:
        """Every rank that reported a step or is named by an agent, sorted."""
        named: set[int] = {r for hello in self.agents for r in hello.ranks}
        stepped = self.steps["rank"]
        named.update(int(r) for r in np.unique(stepped[~np.isnan(stepped)]))
        return sorted(named)

    @property
    def world_size(self) -> int:
        """Largest world size announced, or the number of ranks seen."""
        announced = [h.world_size * max(1, len(h.ranks)) if h.strategy == "mirrored" else h.world_size
                     for h in self.agents]
        return max([*announced, len(self.ranks)], default=0)

    def steps_of(self, rank: int) -> Columns:
        """Step columns of one rank, in step order."""
        mask = self.steps["rank"] == rank
        order = np.argsort(self.steps["step"][mask], kind="stable")
        return {name: column[mask][order] for name, column in self.steps.items()}


def concat_columns(parts: Iterable[Columns]) -> Columns:
    """Concatenate column dicts with the same keys."""
    parts = list(parts)
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
