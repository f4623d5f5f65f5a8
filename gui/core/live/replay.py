"""Reopening a recording: the runs of a session file as ``LiveRuns``, so the window shows them as it showed them live.

What it owns: turning a ``SessionData`` (``ringscope.gui.core.ingest.session_reader.load``) into one filled
``LiveStore`` per run — steps loaded vectorized (``LiveStore.load_steps``), the last readings of every GPU and host,
identities and events — with each run's recorded state and end (``ringscope.gui.core.analysis.runs.runs_of``)
frozen in place.

What it must never do: import Qt, change the file, or re-decide a recorded run's state from today's clock.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import FIELDS, SCHEMA_VERSION, GpuSample, HostSample, Record
from ringscope.gui.core.analysis.runs import LOST_TIMEOUT_S, runs_of
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.session_data import Columns, SessionData

READINGS_PER_DEVICE: Final[int] = 600
"""The window keeps this many readings per GPU and host (``LiveStore(series_len=...)``); older ones are skipped."""


def runs_from_session(data: SessionData, *, lost_timeout_s: float = LOST_TIMEOUT_S) -> LiveRuns:
    """Every run of a recorded session, filled and frozen in its recorded state (read-only)."""
    runs = LiveRuns(lost_timeout_s=lost_timeout_s)
    for info in runs_of(data, lost_timeout_s=lost_timeout_s):
        run = data.for_run(info.run_id)
        store = LiveStore(lost_timeout_s=lost_timeout_s, run_id=info.run_id)
        fill_store(store, run)
        runs.add_recorded(info, store, run.agents)
    return runs


def fill_store(store: LiveStore, data: SessionData) -> None:
    """Load one run's records into an empty store: identities, steps, the last device readings, events."""
    for hello in data.agents:
        store.on_batch(_batch(hello.agent_id, [hello]), hello.started_s)
    store.load_steps(data.steps, _last_seen_by_rank(data))
    readings: list[Record] = [*_last_readings(data.gpu, "gpu", ("host", "gpu_index"), GpuSample),
                              *_last_readings(data.host, "host", ("host",), HostSample)]
    readings.sort(key=lambda r: r.ts_s)  # type: ignore[union-attr]
    if readings:
        store.on_batch(_batch("recording", readings), readings[-1].ts_s)  # type: ignore[union-attr]
    for event, agent in zip(data.events, data.event_agents or [""] * len(data.events), strict=True):
        store.on_batch(_batch(agent or "recording", [event]), event.ts_s)


def _batch(agent_id: str, records: list[Record]) -> wire.Batch:
    return wire.Batch(agent_id, 0, 0.0, SCHEMA_VERSION, records)


def _last_readings(columns: Columns, kind: str, keys: tuple[str, ...], cls: type) -> list[Record]:
    """The last ``READINGS_PER_DEVICE`` rows per device as records (older ones would leave the rings anyway)."""
    count = len(columns["ts_s"])
    if count == 0:
        return []
    key = np.array(["\0".join(str(columns[k][i]) for k in keys) for i in range(count)], dtype=object) \
        if len(keys) > 1 else columns[keys[0]].astype(str)
    order = np.lexsort((columns["ts_s"], key))
    key_sorted = key[order]
    last_of_group = np.r_[key_sorted[1:] != key_sorted[:-1], True]
    group_end = np.flatnonzero(last_of_group)
    keep: list[int] = []
    start = 0
    for end in group_end.tolist():
        keep.extend(order[max(start, end + 1 - READINGS_PER_DEVICE): end + 1].tolist())
        start = end + 1
    names = [spec.name for spec in FIELDS[kind]]
    out: list[Record] = []
    for i in keep:
        values = []
        for spec, name in zip(FIELDS[kind], names, strict=True):
            value = columns[name][i]
            if spec.sql_type in ("REAL", "INTEGER"):
                value = None if value is None or (isinstance(value, float) and math.isnan(value)) else \
                    (int(value) if spec.sql_type == "INTEGER" else float(value))
            values.append(value)
        out.append(cls(*values))
    return out


def _last_seen_by_rank(data: SessionData) -> dict[int, float]:
    """Each rank's last receive time (what the live window judged silence by)."""
    steps = data.steps
    if not len(steps["rank"]) or "recv_s" not in steps:
        return {}
    ranks = steps["rank"].astype(np.int64)
    unique, inverse = np.unique(ranks, return_inverse=True)
    latest = np.full(unique.size, -np.inf)
    np.maximum.at(latest, inverse, np.nan_to_num(steps["recv_s"], nan=-np.inf))
    return {int(r): float(t) for r, t in zip(unique.tolist(), latest.tolist(), strict=True) if math.isfinite(t)}


__all__ = ["READINGS_PER_DEVICE", "fill_store", "runs_from_session"]
