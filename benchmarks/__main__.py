"""Run the benchmarks: discover ``benchmarks/bench_*.py``, call ``run(quick)``, print a table, write results.json.

A benchmark that raises is reported as failed in the table; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    """Topic names of every ``bench_<topic>.py`` next to this file, sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def run_topic(topic: str, quick: bool) -> list[dict[str, Any]]:
    """Rows of one topic, or one 'failed' row saying why."""
    started = time.monotonic()
    try:
        module = importlib.import_module(f"benchmarks.bench_{topic}")
        rows = list(module.run(quick=quick))
    except Exception as exc:
        traceback.print_exc()
        return [{"benchmark": topic, "metric": "FAILED", "value": math.nan, "unit": "",
                 "note": f"{type(exc).__name__}: {exc}"[:200]}]
    for row in rows:
        row.setdefault("note", "")
    rows.append({"benchmark": topic, "metric": "benchmark wall time", "value": time.monotonic() - started,
                 "unit": "s", "note": ""})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = ["| benchmark | metric | value | unit | note |", "| --- | --- | ---: | --- | --- |"]
    for row in rows:
        value = row["value"]
        shown = "—" if isinstance(value, float) and math.isnan(value) else f"{value:,.4g}" if isinstance(
            value, float) else f"{value:,}"
        note = str(row.get("note", "")).replace("|", "/")
        lines.append(f"| {row['benchmark']} | {row['metric']} | {shown} | {row['unit']} | {note} |")
    return "\n".join(lines)


def merge_results(path: Path, rows: list[dict[str, Any]], quick: bool) -> dict[str, Any]:
    """Earlier results with this run's topics replaced, so running one topic keeps the others' latest figures."""
    stamp = {"quick": quick, "python": platform.python_version(), "machine": platform.machine(),
             "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        previous = json.loads(path.read_text()).get("rows", [])
    except (OSError, ValueError, AttributeError):
        previous = []
    ran = {row["benchmark"] for row in rows}
    kept = [row for row in previous if isinstance(row, dict) and row.get("benchmark") not in ran]
    return {**stamp, "rows": kept + [{**row, **{"run": stamp}} for row in rows]}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``."""
    topics = discover()
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("topics", nargs="*", metavar="TOPIC", help=f"topics to run (default all: {', '.join(topics)})")
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds per topic")
    parser.add_argument("--out", default=str(HERE / "results.json"), help="where to write the JSON results")
    args = parser.parse_args(argv)
    unknown = [t for t in args.topics if t not in topics]
    if unknown:
        parser.error(f"unknown topic(s) {', '.join(unknown)}; known: {', '.join(topics)}")
    rows: list[dict[str, Any]] = []
    for topic in args.topics or topics:
        print(f"running {topic} ({'quick' if args.quick else 'full'}) ...", file=sys.stderr, flush=True)
        rows.extend(run_topic(topic, args.quick))
    table = markdown(rows)
    print(table)
    Path(args.out).write_text(json.dumps(merge_results(Path(args.out), rows, args.quick), indent=2, default=str) + "\n")
    return 1 if any(r["metric"] == "FAILED" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
