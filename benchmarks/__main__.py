"""Run the benchmarks: discover ``benchmarks/bench_*.py``, call ``run(quick)``, print a table, write results.json.

A benchmark that raises is reported as failed in the table; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
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


def scale_options(topic: str) -> set[str]:
    """The scale options (``ranks``, ``rate``) that a topic's ``run`` takes."""
    module = importlib.import_module(f"benchmarks.bench_{topic}")
    return {name for name in inspect.signature(module.run).parameters if name in SCALE_OPTIONS}


SCALE_OPTIONS = ("ranks", "rate", "record")
"""Options a topic may take besides ``quick`` (``python -m benchmarks gui --ranks 8192 --rate 2``)."""


def run_topic(topic: str, quick: bool, **scale: Any) -> list[dict[str, Any]]:
    """Rows of one topic, or one 'failed' row saying why."""
    started = time.monotonic()
    try:
        module = importlib.import_module(f"benchmarks.bench_{topic}")
        rows = list(module.run(quick=quick, **scale))
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
    parser.add_argument("--ranks", type=_positive(int), help="simulated ranks, for the topics that take it (gui)")
    parser.add_argument("--rate", type=_positive(float), help="steps per second per rank, for the topics that "
                        "take it (gui)")
    parser.add_argument("--record", action="store_true", default=None, help="record the session to a file as "
                        "'ringscope window' does by default, for the topics that take it (gui)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.topics if t not in topics]
    if unknown:
        parser.error(f"unknown topic(s) {', '.join(unknown)}; known: {', '.join(topics)}")
    scale = {name: getattr(args, name) for name in SCALE_OPTIONS if getattr(args, name) is not None}
    if scale:
        chosen = args.topics or topics
        refusing = [t for t in chosen if not set(scale) <= scale_options(t)]
        if refusing:
            parser.error(f"--{' and --'.join(scale)} apply to topics that take them; {', '.join(refusing)} do(es) "
                         f"not (name the topic, e.g. 'python -m benchmarks gui --ranks 8192 --rate 2')")
    rows: list[dict[str, Any]] = []
    for topic in args.topics or topics:
        print(f"running {topic} ({'quick' if args.quick else 'full'}) ...", file=sys.stderr, flush=True)
        rows.extend(run_topic(topic, args.quick, **scale))
    table = markdown(rows)
    print(table)
    Path(args.out).write_text(json.dumps(merge_results(Path(args.out), rows, args.quick), indent=2, default=str) + "\n")
    return 1 if any(r["metric"] == "FAILED" for r in rows) else 0


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be > 0")
        return value
    return parse


if __name__ == "__main__":
    sys.exit(main())
