"""Chrome-trace / Perfetto JSON of per-rank step phases: one track per rank, one complete ("X") event per phase.

Owns the trace layout. Within a step the phases are laid out in the order data wait, compute, exposed comm,
other from the step's start: the agent measures how long each phase took, not when each began, so the order
inside a step is the usual one, not a measurement. Timestamps are microseconds since the session's first step
(``otherData.session_start_unix_s`` gives the origin). Written to a temporary file and renamed, so a cancelled
export leaves nothing behind. Must never import Qt.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ringscope.gui.core.analysis.summary import phase_seconds
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.report.html import give_user_mode
from ringscope.gui.core.report.progress import Progress
from ringscope.gui.core.session_data import SessionData

PROCESS_ID: int = 1
EVENTS_PER_PROGRESS: int = 5_000


def write_trace(session: SessionData, path: str | Path, progress: Progress | None = None) -> Path:
    """Write the trace JSON (``{"traceEvents": [...]}``) and return its path."""
    progress = progress or Progress()
    target = Path(path)
    steps = session.steps
    count = len(steps["step"])
    origin = float(np.nanmin(steps["start_s"])) if count else 0.0
    phases = phase_seconds(steps)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write('{"displayTimeUnit": "ms", "otherData": ')
            handle.write(json.dumps({"session_start_unix_s": origin, "source": session.source,
                                     "run_id": session.agents[0].run_id if session.agents else ""}))
            handle.write(', "traceEvents": [\n')
            first = True
            for event in _metadata(session):
                handle.write(("" if first else ",\n") + json.dumps(event))
                first = False
            starts = steps["start_s"].tolist()
            ranks = steps["rank"].tolist()
            numbers = steps["step"].tolist()
            step_s = np.nan_to_num(steps["step_s"]).tolist()
            values = {p.name: phases[p.name].tolist() for p in PHASES}
            every = max(1, min(EVENTS_PER_PROGRESS, count // 20))  # at least ~20 chances to cancel
            for i in range(count):
                if i % every == 0:
                    progress(i / max(count, 1), "writing trace events")
                for event in _step_events(i, origin, starts, ranks, numbers, step_s, values):
                    handle.write(("" if first else ",\n") + json.dumps(event))
                    first = False
            handle.write("\n]}\n")
            progress(1.0, "trace written")  # the last chance to cancel, before the file appears
        give_user_mode(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _metadata(session: SessionData) -> list[dict[str, Any]]:
    name = f"Ringscope run {session.agents[0].run_id}" if session.agents else "Ringscope run"
    events: list[dict[str, Any]] = [{"ph": "M", "pid": PROCESS_ID, "name": "process_name", "args": {"name": name}}]
    for rank in session.ranks:
        events.append({"ph": "M", "pid": PROCESS_ID, "tid": rank, "name": "thread_name",
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "pid": PROCESS_ID, "tid": rank, "name": "thread_sort_index",
                       "args": {"sort_index": rank}})
    return events


def _step_events(i: int, origin: float, starts: list[float], ranks: list[float], numbers: list[float],
                 step_s: list[float], values: dict[str, list[float]]) -> list[dict[str, Any]]:
    rank = int(ranks[i])
    ts = (starts[i] - origin) * 1e6
    out: list[dict[str, Any]] = [{"ph": "X", "pid": PROCESS_ID, "tid": rank, "name": f"step {int(numbers[i])}",
                                  "cat": "step", "ts": round(ts, 3), "dur": round(step_s[i] * 1e6, 3),
                                  "args": {"step": int(numbers[i]), "rank": rank}}]
    for phase in PHASES:
        dur = values[phase.name][i] * 1e6
        if dur > 0:
            out.append({"ph": "X", "pid": PROCESS_ID, "tid": rank, "name": phase.label, "cat": phase.name,
                        "ts": round(ts, 3), "dur": round(dur, 3),
                        "args": {"step": int(numbers[i]), "seconds": values[phase.name][i]}})
        ts += max(dur, 0.0)
    return out
