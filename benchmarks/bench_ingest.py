"""Ingest throughput: N simulated ranks x R steps/s -> collector + recorder (this process) -> SQLite.

Reports records/s decoded and recorded, loss (sent by the agents vs recorded; gaps), and the CPU of the
collector process (this one: the simulated ranks run in their own processes). The ``(secure)`` rows run the same
load through a ``--secure`` collector (CURVE encryption + authentication): compare their CPU per record.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ringscope.agent.keys import CollectorKeys
from ringscope.agent.simulate import run_cluster
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder


def block_cost(ranks: int = 1024, steps: int = 10, repeats: int = 20) -> list[dict[str, Any]]:
    """Writer-thread CPU the columnar copy of the step rows (``ringscope.gui.core.ingest.blocks``) adds per step row:
    encoding one commit's rows (``ranks`` x ``steps``, as the converter makes them) into a block."""
    from ringscope.agent import wire
    from ringscope.agent.schema import Step
    from ringscope.gui.core.ingest import blocks

    records = [Step(r, s, 1.7e9 + s, 1.7e9 + s + 0.1, 0.1, data_wait_s=0.01, compute_s=0.05, comm_s=0.03,
                    comm_exposed_s=0.02, samples=32, loss=0.5) for s in range(steps) for r in range(ranks)]
    rows = [(f"agent-{record.rank}", 1.7e9, *wire.record_values(record)) for record in records]
    started = time.thread_time()
    for _ in range(repeats):
        encoded = blocks.encode(rows)
    per_row_us = (time.thread_time() - started) / (repeats * len(rows)) * 1e6
    assert encoded is not None
    return [{"benchmark": "ingest", "metric": "recorder: columnar block per step row", "value": per_row_us,
             "unit": "µs CPU", "note": f"writer thread; {len(rows)} rows per commit; "
                                       f"{len(encoded[2]) / len(rows):.0f} bytes per row in the block"}]


def measure(ranks: int, steps_per_second: float, duration_s: float, secure: bool = False,
            ranks_per_agent: int | None = None) -> list[dict[str, Any]]:
    """One run; rows named after its size. ``ranks_per_agent=1``: an agent per rank, as a DDP job has (the simulator
    otherwise puts up to 32 ranks on one agent past 64 agents per process): the messages, not the records, cost."""
    keys = CollectorKeys.generate() if secure else None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        recorder = Recorder(path).start()
        collector = Collector("tcp://127.0.0.1:0", [recorder], keys=keys).start()
        cpu_start, wall_start = time.process_time(), time.monotonic()
        try:
            result = run_cluster(ranks, endpoint=collector.endpoint, steps_per_second=steps_per_second,
                                 duration_s=duration_s, keys=keys.agent_keys if keys is not None else None,
                                 ranks_per_agent=ranks_per_agent)
            deadline = time.monotonic() + 30
            while collector.counters.records < result.sent_records and time.monotonic() < deadline:
                time.sleep(0.05)
            cpu_s, wall_s = time.process_time() - cpu_start, time.monotonic() - wall_start
        finally:
            collector.close()
            recorder.close(60)
        counters = collector.counters
        file_mb = path.stat().st_size / 1e6
    size = f"{ranks} ranks x {steps_per_second:g} steps/s" + (" (secure)" if secure else "") + \
        (f", {ranks_per_agent} rank(s) per agent" if ranks_per_agent else "")
    lost = result.sent_records - recorder.rows_written
    return [
        {"benchmark": "ingest", "metric": f"{size}: records recorded per s",
         "value": recorder.rows_written / result.run_s, "unit": "records/s",
         "note": f"{recorder.rows_written} records over a {result.run_s:.1f} s run"},
        {"benchmark": "ingest", "metric": f"{size}: achieved steps/s per rank", "value": result.steps_per_second,
         "unit": "steps/s", "note": f"{result.steps} steps; {result.processes} sim processes, {result.agents} agents"},
        {"benchmark": "ingest", "metric": f"{size}: lost (sent - recorded)", "value": float(lost), "unit": "records",
         "note": f"gaps {counters.gaps} (missing msgs {counters.missing_messages}); agents dropped "
                 f"{result.dropped_records}; recorder dropped {recorder.dropped_records}"},
        {"benchmark": "ingest", "metric": f"{size}: collector+recorder CPU per record",
         "value": cpu_s / max(1, recorder.rows_written) * 1e6, "unit": "µs CPU",
         "note": f"{cpu_s:.1f} s CPU in {wall_s:.1f} s incl. simulator start-up; file {file_mb:.0f} MB"},
        {"benchmark": "ingest", "metric": f"{size}: collector+recorder CPU per message",
         "value": cpu_s / max(1, counters.messages) * 1e6, "unit": "µs CPU",
         "note": f"{counters.messages} messages from {result.agents} agents, "
                 f"{recorder.rows_written / max(1, counters.messages):.1f} records each"},
        {"benchmark": "ingest", "metric": f"{size}: collector+recorder CPU at this rate",
         "value": 100.0 * cpu_s / max(1, recorder.rows_written) * (recorder.rows_written / result.run_s),
         "unit": "% of 1 core", "note": "CPU per record x records per second of the run"},
    ]


def record_cli(ranks: int, steps_per_second: float, duration_s: float) -> list[dict[str, Any]]:
    """The headless recorder users run on a master node (``ringscope record``, its own process) under ``ranks``
    simulated ranks: every step of every rank in the file, or how many are not (the simulator's default processes:
    at most 2 per core)."""
    import subprocess
    import sys

    from ringscope.gui.core.launch.endpoints import free_ports

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "record.db"
        endpoint = f"tcp://127.0.0.1:{free_ports(1)[0]}"
        log = Path(folder) / "record.log"
        with log.open("w") as sink:
            recorder = subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(path),
                                         "--bind", endpoint], stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while "listening on" not in log.read_text() and recorder.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)  # bound: every record from the first step on has somewhere to go
            started = time.monotonic()
            result = run_cluster(ranks, endpoint=endpoint, steps_per_second=steps_per_second,
                                 duration_s=duration_s)
            simulated_s = time.monotonic() - started
        finally:
            recorder.send_signal(2)  # Ctrl-C: ringscope record writes everything it received, then exits
            recorder.wait(timeout=600)
            output = log.read_text()
        drained_s = time.monotonic() - started - simulated_s
        info = json.loads(subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(path)],
                                         capture_output=True, text=True, timeout=600, check=True).stdout)
        file_mb = path.stat().st_size / 1e6
    expected = result.steps * ranks
    written = int(info["steps_total"])
    size = f"ringscope record, {ranks} ranks x {steps_per_second:g} steps/s"
    last = output.strip().splitlines()[-1] if output.strip() else ""
    return [
        {"benchmark": "ingest", "metric": f"{size}: steps not in the file", "value": float(expected - written),
         "unit": "steps", "note": f"{written} of {expected} ({result.steps} steps x {ranks} ranks); gaps "
                                  f"{info['gaps']}, dropped by agents {info['dropped_by_agents']}, recorder dropped "
                                  f"{info['recorder_dropped_records']}; {result.processes} sim processes, "
                                  f"{result.agents} agents"},
        {"benchmark": "ingest", "metric": f"{size}: records per s, every one in the file",
         "value": result.sent_records / simulated_s, "unit": "records/s",
         "note": f"{result.sent_records} records in {simulated_s:.1f} s; the file was complete {drained_s:.1f} s "
                 f"after the last step ({file_mb:.0f} MB); recorder's last line: {last[:120]}"},
    ]


def run(quick: bool = False, ranks: int | None = None, rate: float | None = None) -> list[dict[str, Any]]:
    """Quick: 64 ranks x 100 steps/s for 3 s, plain and secure. Full: also 1024 ranks x 100 steps/s for 5 s, plain
    and secure, and 256 one-rank agents x 20 steps/s for 8 s (about a message per record). With ``ranks``
    (``python -m benchmarks ingest --ranks 16384 --rate 1``): only ``ringscope record`` under that many ranks for
    30 s."""
    if ranks is not None:
        return record_cli(ranks, rate or 1.0, 30.0)
    rows = measure(64, 100, 3.0) + measure(64, 100, 3.0, secure=True) + block_cost()
    if not quick:
        rows += measure(1024, 100, 5.0) + measure(1024, 100, 5.0, secure=True)
        rows += measure(256, 20, 8.0, ranks_per_agent=1)
    return rows
