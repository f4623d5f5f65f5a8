"""What a Prometheus scrape of the metrics endpoint costs, at 256 and 1024 ranks (one run, a GPU per rank).

Measured over real HTTP (``MetricsServer`` on loopback, ``urllib``) while the store changes between scrapes (one new
step per rank, so no snapshot cache helps), with the default per-rank cap (64: p5/p50/p95 + the 8 worst ranks +
the straggler) and without a cap (every rank its own series).
"""

from __future__ import annotations

import statistics
import time
import urllib.request
from typing import Any

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, GpuStatus, Hello, HostSample, Step
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.metrics import MetricsLimits, MetricsServer

T0 = time.time() - 60.0


def _feed(runs: LiveRuns, ranks: int, first: int, steps: int, seq: list[int]) -> None:
    for k in range(first, first + steps):
        end = T0 + (k + 1) * 0.1
        for r in range(ranks):
            comm = 0.001 if r == 3 else 0.02 + 0.0001 * r
            records: list[Any] = [Step(r, k, end - 0.1, end, 0.1, 0.005, 0.09 if r == 3 else 0.05, comm + 0.01, comm,
                                       32)]
            if k == first:  # a fresh reading of the rank's GPU per scrape (older than 30 s is not exported)
                records.append(GpuSample(time.time(), f"node{r // 8:04d}", r % 8, uuid=f"GPU-{r:05d}", name="bench",
                                         rank=r, util_pct=50.0, mem_used_bytes=2**34, mem_total_bytes=2**36,
                                         power_w=300.0, temp_c=60.0, sm_clock_mhz=1980.0))
            seq[r] += 1
            runs.on_batch(wire.decode(wire.encode(f"a{r}", seq[r], end, records)), end)


def _cluster(ranks: int) -> tuple[LiveRuns, list[int]]:
    runs = LiveRuns(lost_timeout_s=3600.0)
    seq = [0] * ranks
    for r in range(ranks):
        hello = Hello("bench", f"a{r}", f"node{r // 8:04d}", 1, r, r % 8, ranks, r // 8, [r], "pytorch", "ddp",
                      "nccl", [], "0.1.0", "1.0", T0, 0.0, T0)
        host = HostSample(T0, f"node{r // 8:04d}", 10.0, gpu_count=8, gpu_status=GpuStatus.OK)
        runs.on_batch(wire.decode(wire.encode(f"a{r}", 0, T0, [hello, host])), T0)
    _feed(runs, ranks, 0, 25, seq)
    return runs, seq


def _scrapes(runs: LiveRuns, ranks: int, seq: list[int], limits: MetricsLimits, count: int) -> dict[str, float]:
    with MetricsServer(runs, None, "127.0.0.1", 0, limits=limits) as server:
        took, built, size = [], [], 0
        for i in range(count):
            _feed(runs, ranks, 25 + i, 1, seq)  # the store moved: the scrape builds fresh snapshots
            started = time.perf_counter()
            with urllib.request.urlopen(server.url, timeout=30) as response:
                body = response.read()
            took.append(time.perf_counter() - started)
            size = len(body)
            line = next(b for b in body.splitlines() if b.startswith(b"ringscope_exporter_collect_seconds "))
            built.append(float(line.split()[1]))
        series = sum(1 for b in body.splitlines() if b and not b.startswith(b"#"))
    return {"scrape": statistics.median(took), "collect": statistics.median(built), "bytes": size,
            "series": series}


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Rows: median scrape wall time over HTTP, collect time, size and series, capped and uncapped."""
    rows: list[dict[str, Any]] = []
    for ranks in (256,) if quick else (256, 1024):
        runs, seq = _cluster(ranks)
        for label, limits in (("default cap (64 ranks)", MetricsLimits()),
                              ("no cap", MetricsLimits(max_ranks_per_run=ranks))):
            figures = _scrapes(runs, ranks, seq, limits, 5 if quick else 15)
            note = f"{ranks} ranks, {label}; {figures['series']:,} series, {figures['bytes'] / 1e3:,.0f} kB"
            rows.append({"benchmark": "metrics", "metric": f"scrape over HTTP, {ranks} ranks, {label}",
                         "value": figures["scrape"] * 1e3, "unit": "ms", "note": note})
            rows.append({"benchmark": "metrics", "metric": f"collect (build families), {ranks} ranks, {label}",
                         "value": figures["collect"] * 1e3, "unit": "ms", "note": "median"})
    return rows
