"""What ``ringscope info`` prints about a session file: its identity, runs (with their goodput accounting), ranks,
steps per rank, time span, losses, hangs, events, agents and size on disk.

Reads the file with ``ringscope.gui.core.ingest.session_reader``; must never modify it, and never import Qt.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ringscope.agent.schema import EventKind
from ringscope.gui.core.analysis.goodput import run_accounting
from ringscope.gui.core.analysis.runs import runs_of
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.ingest.session_schema import file_bytes
from ringscope.gui.core.session_data import SessionData


def summarize(path: str | Path) -> dict[str, Any]:
    """What ``ringscope info`` prints: run ids, ranks, steps per rank, time span, losses, events, agents, size."""
    path = Path(path)
    data = load(path)
    steps = data.steps
    ranks = steps["rank"]
    per_rank: dict[str, int] = {}
    if len(ranks):
        values, counts = np.unique(ranks[~np.isnan(ranks)].astype(np.int64), return_counts=True)
        per_rank = {str(int(r)): int(c) for r, c in zip(values, counts, strict=True)}
    times = np.concatenate([steps["start_s"], steps["end_s"], data.gpu["ts_s"], data.host["ts_s"]])
    times = times[~np.isnan(times)]
    meta = data.counters["meta"]
    counters = {k: v for k, v in data.counters.items() if k != "meta"}
    return {
        "path": str(path),
        "file_bytes": file_bytes(path),
        "schema_version": meta.get("schema_version"),
        "ringscope_version": meta.get("ringscope_version"),
        "complete": "closed_s" in meta,
        "run_ids": sorted({h.run_id for h in data.agents} | set(json.loads(meta.get("run_ids", "[]")))),
        "runs": [{**run.to_json(), **run_accounting(data, run.run_id)} for run in runs_of(data)],
        "hangs": _hangs(data),
        "ranks": data.ranks,
        "world_size": data.world_size,
        "steps_per_rank": per_rank,
        "steps_total": len(ranks),
        "time_span": {
            "start_s": float(times.min()) if len(times) else None,
            "end_s": float(times.max()) if len(times) else None,
            "duration_s": float(times.max() - times.min()) if len(times) else 0.0,
        },
        "gaps": counters.get("gaps", 0),
        "missing_messages": counters.get("missing_messages", 0),
        "joined_late": counters.get("joined_late", []),
        "missing_before_join": counters.get("missing_before_join", 0),
        "dropped_by_agents": counters.get("dropped_by_agents", 0),
        "recorder_dropped_records": counters.get("recorder_dropped_records", 0),
        "write_errors": counters.get("write_errors", 0),
        "last_write_error": counters.get("last_write_error"),
        "sequences": counters.get("sequences", {}),
        "rejected": counters.get("rejected", {}),
        "events": dict(Counter(e.event for e in data.events)),
        "agents": [
            {"agent_id": h.agent_id, "host": h.host, "pid": h.pid, "ranks": h.ranks, "framework": h.framework,
             "strategy": h.strategy, "backend": h.backend, "run_id": h.run_id}
            for h in data.agents
        ],
    }


def _hangs(data: SessionData) -> list[dict[str, Any]]:
    """The hang events the app recorded (a run stopped completing steps), with the run they belong to."""
    run_of = {h.agent_id: h.run_id for h in data.agents}
    return [{"run_id": run_of.get(agent, ""), "ts_s": event.ts_s, "rank": event.rank, "step": event.step,
             "stalled_s": event.duration_s, "text": event.text}
            for event, agent in zip(data.events, data.event_agents, strict=False) if event.event == EventKind.HANG]
