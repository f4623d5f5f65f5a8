"""Profiles on demand, handed back as one trace per run: the ranks' Kineto traces on one aligned clock.

Input is the ``result`` a collector returns for a ``profile`` request (``ringscope.gui.core.ingest.requests``): per
rank the path of its Chrome trace on its own host, its top operators, and the clock offset the collector measured
for its agent. ``merge`` reads the traces it can (ranks on this host, or on a shared file system), puts every event
on the collector's clock (Kineto's ``baseTimeNanoseconds`` + ``ts``, plus the agent's clock offset), gives each rank
its own process track (``rank R (host)``, sorted by rank) and writes ``trace.json``, which opens in ui.perfetto.dev
or chrome://tracing; the raw per-rank traces are copied beside it (``ranks/``), and ``summary.txt`` lists each rank's
top operators. Nothing here imports Qt.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class ProfileSummary:
    """What ``merge`` wrote and what it could not."""

    trace: Path | None
    ranks: list[int] = field(default_factory=list)  # ranks whose events are in the trace
    problems: list[str] = field(default_factory=list)  # ranks with no trace here, and why
    top_ops: dict[int, list[list[Any]]] = field(default_factory=dict)  # rank -> [name, self CPU ms, device ms, calls]
    events: int = 0
    tensorboard: list[Path] = field(default_factory=list)  # TensorFlow profiles copied in TensorBoard's layout

    def text(self, top: int = 10) -> str:
        """One screen: where the trace is, then each rank's top operators by self time."""
        lines = [f"trace: {self.trace} ({self.events:,} events, ranks {', '.join(map(str, self.ranks)) or 'none'})"
                 if self.trace else "no trace written"]
        lines += [f"  {problem}" for problem in self.problems]
        for rank, ops in sorted(self.top_ops.items()):
            lines.append(f"rank {rank}: top operators by self CPU time")
            for name, cpu_ms, device_ms, calls in ops[:top]:
                device = f", device {device_ms:.3f} ms" if device_ms else ""
                lines.append(f"  {cpu_ms:10.3f} ms  {calls:6d} calls  {name}{device}")
        return "\n".join(lines)


def merge(result: dict[str, Any], out_dir: str | Path) -> ProfileSummary:
    """Write ``out_dir/trace.json`` (all readable ranks), ``out_dir/ranks/`` and ``out_dir/summary.txt``."""
    out = Path(out_dir)
    (out / "ranks").mkdir(parents=True, exist_ok=True)
    summary = ProfileSummary(trace=None)
    loaded: list[tuple[int, str, float, dict[str, Any]]] = []
    for entry in sorted(result.get("ranks", []), key=lambda e: (e.get("rank") is None, e.get("rank") or 0)):
        rank = entry.get("rank")
        who = f"rank {rank} ({entry.get('host') or '?'}, pid {entry.get('pid')})"
        if not entry.get("answered"):
            summary.problems.append(f"{who}: {entry.get('note') or 'no answer'}")
            continue
        if entry.get("error"):
            summary.problems.append(f"{who}: {entry['error']}")
            continue
        if entry.get("top_ops"):
            summary.top_ops[int(rank or 0)] = [list(op) for op in entry["top_ops"]]
        path = Path(str(entry.get("trace") or ""))
        if entry.get("format") == "tensorboard":  # TensorFlow: XPlane files, kept in TensorBoard's layout
            target = out / "tensorboard" / f"rank{rank}"
            try:
                shutil.copytree(path, target, dirs_exist_ok=True)
                summary.problems.append(f"{who}: TensorFlow profile in TensorBoard's layout: tensorboard --logdir "
                                        f"{target} (Profile tab)")
                summary.tensorboard.append(target)
            except OSError as exc:
                summary.problems.append(f"{who}: its profile {path} cannot be read here ({type(exc).__name__}); "
                                        f"copy it from {entry.get('host')}")
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            summary.problems.append(f"{who}: its trace {path} cannot be read here ({type(exc).__name__}); copy it "
                                    f"from {entry.get('host')} (ranks on other hosts write on their own disk)")
            continue
        shutil.copyfile(path, out / "ranks" / path.name)
        loaded.append((int(rank or 0), str(entry.get("host") or ""), float(entry.get("clock_offset_s") or 0.0), data))
    if not loaded:
        (out / "summary.txt").write_text(summary.text() + "\n")
        return summary
    # every rank's events on the collector's clock, in microseconds since the earliest rank's base
    bases = {rank: data.get("baseTimeNanoseconds", 0) / 1000.0 + offset * 1e6 for rank, _, offset, data in loaded}
    origin = min(bases.values())
    events: list[dict[str, Any]] = []
    for rank, host, _, data in loaded:
        shift = bases[rank] - origin
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank} ({host})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        for event in data.get("traceEvents", []):
            if not isinstance(event, dict) or (event.get("ph") == "M" and str(event.get("name", "")).startswith(
                    "process_")):
                continue  # Kineto names its process "python": the rank's name replaces it
            moved = dict(event)
            if isinstance(moved.get("ts"), int | float):
                moved["ts"] = float(moved["ts"]) + shift
            moved["pid"] = rank
            events.append(moved)
        summary.ranks.append(rank)
    trace = {"traceEvents": events, "displayTimeUnit": "ms",
             "otherData": {"ringscope": "profile on demand", "origin_unix_us": origin, "run_id": result.get("run_id")}}
    summary.trace = out / "trace.json"
    summary.trace.write_text(json.dumps(trace))
    summary.events = sum(1 for e in events if e.get("ph") != "M")
    (out / "summary.txt").write_text(summary.text() + "\n")
    return summary
