"""LiveRunsCollector on a LiveRuns fed directly: every figure equals the window's snapshot, missing readings stay
absent (never 0), runs expire, the per-rank cap holds, and GPUs carry dcgm-exporter's names and labels."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from ringscope.agent import wire
from ringscope.agent.schema import Event, EventKind, GpuSample, GpuStatus, Hello, HostSample, Step
from ringscope.agent.wire import Batch
from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.analysis.runs import RUN_STATES
from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.metrics import LiveRunsCollector, MetricsLimits

T0 = 1_700_000_000.0
DASHBOARD = Path(__file__).resolve().parents[4] / "resources" / "grafana" / "ringscope-dashboard.json"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def hello(run_id: str, agent_id: str, rank: int, world: int, *, host: str = "node0",
          framework: str = "pytorch") -> Hello:
    return Hello(run_id, agent_id, host, 1, rank, rank, world, 0, [rank], framework, "ddp", "gloo", [], "0.1.0",
                 "1.0", T0, 0.0, T0)


def batch(agent_id: str, records: list, seq: int) -> Batch:
    return wire.decode(wire.encode(agent_id, seq, T0, records))


def feed(runs: LiveRuns, run_id: str, ranks: int, steps: int, *, slow: int | None = None, phases: bool = True,
         host_of=lambda r: "node0", stall_of=lambda r: 0.02) -> float:
    """``ranks`` agents of one rank each, 10 steps/s; rank ``slow`` computes 40 ms longer and waits least."""
    agents = [f"{run_id}-a{r}" for r in range(ranks)]
    for r, agent in enumerate(agents):
        runs.on_batch(batch(agent, [hello(run_id, agent, r, ranks, host=host_of(r))], 0), T0)
    end = T0
    for k in range(steps):
        end = T0 + (k + 1) * 0.1
        for r, agent in enumerate(agents):
            comm = 0.001 if r == slow else stall_of(r)
            comp = 0.09 if r == slow else 0.05
            record = (Step(r, k, end - 0.1, end, 0.1, 0.005, comp, comm + 0.01, comm, 32) if phases
                      else Step(r, k, end - 0.1, end, 0.1, samples=32))
            runs.on_batch(batch(agent, [record], k + 1), end)
    return end


def scrape(collector: LiveRunsCollector) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert "NaN" not in text and "Inf" not in text  # a missing reading is no sample
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def find(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {key: value for (n, key), value in samples.items()
            if n == name and all(dict(key).get(k) == v for k, v in labels.items())}


def one(samples: Samples, name: str, **labels: str) -> float:
    hits = find(samples, name, **labels)
    assert len(hits) == 1, (name, labels, hits)
    return next(iter(hits.values()))


def test_per_rank_figures_straggler_and_state_equal_the_snapshot() -> None:
    runs = LiveRuns()
    end = feed(runs, "ddp", 4, 30, slow=2)
    runs.on_batch(batch("ddp-a0", [HostSample(end, "node0", 20.0, gpu_count=0, gpu_status=GpuStatus.NO_GPU)], 31),
                  end)
    samples = scrape(LiveRunsCollector(runs, clock=lambda: end))
    snap = runs.store("ddp").snapshot(now_s=end)  # type: ignore[union-attr]
    assert snap.straggler is not None and snap.straggler.rank == 2
    for i, rank in enumerate(snap.ranks.tolist()):
        labels = {"run": "ddp", "rank": str(rank), "host": "node0", "framework": "pytorch", "strategy": "ddp"}
        assert one(samples, "ringscope_rank_comm_exposed_seconds", **labels) == pytest.approx(
            float(snap.recent_comm_exposed_s[i]))
        assert one(samples, "ringscope_rank_comm_exposed_ratio", **labels) == pytest.approx(
            float(snap.recent_comm_exposed_s[i] / snap.recent_step_s[i]))
        assert one(samples, "ringscope_rank_compute_seconds", **labels) == pytest.approx(0.09 if rank == 2 else 0.05)
        assert one(samples, "ringscope_rank_steps_total", **labels) == 30
        assert one(samples, "ringscope_rank_samples_total", **labels) == 30 * 32
    assert one(samples, "ringscope_straggler", run="ddp") == 1
    straggler = dict(next(iter(find(samples, "ringscope_straggler"))))
    assert (straggler["rank"], straggler["cause"], straggler["host"]) == ("2", "compute", "node0")
    assert one(samples, "ringscope_run_straggler_found", run="ddp") == 1
    assert {dict(k)["state"]: v for k, v in find(samples, "ringscope_run_state", run="ddp").items()} == {
        state: float(state == "running") for state in RUN_STATES}
    assert one(samples, "ringscope_run_idle_ratio", run="ddp") == pytest.approx(snap.idle_share)
    assert one(samples, "ringscope_run_idle_cause_ratio", run="ddp", cause=snap.idle_cause) == pytest.approx(
        snap.idle_cause_share)
    row = runs.rows(now_s=end)[0]
    assert one(samples, "ringscope_run_cost", run="ddp") == pytest.approx(row.cost(DEFAULT_PRICE_PER_GPU_HOUR))
    assert one(samples, "ringscope_run_waiting_cost_per_hour", run="ddp") == pytest.approx(
        snap.idle_share * 4 * DEFAULT_PRICE_PER_GPU_HOUR)
    assert one(samples, "ringscope_price_per_device_hour", source="default") == DEFAULT_PRICE_PER_GPU_HOUR
    # no GPU: not one DCGM series, and the host says so
    assert not [name for name, _ in samples if name.startswith("DCGM_")]
    assert one(samples, "ringscope_gpu_present", host="node0") == 0
    # percentiles over ranks are the per-rank means' percentiles
    stall = snap.recent_comm_exposed_s.astype(np.float64)
    for quantile, q in (("0.05", 5), ("0.5", 50), ("0.95", 95)):
        assert one(samples, "ringscope_ranks_comm_exposed_seconds", run="ddp", quantile=quantile) == pytest.approx(
            float(np.percentile(stall, q)))


def test_unknown_phases_are_absent_not_zero() -> None:
    runs = LiveRuns()
    end = feed(runs, "fit", 2, 10, phases=False)  # Keras fit: step time only
    samples = scrape(LiveRunsCollector(runs, clock=lambda: end))
    assert len(find(samples, "ringscope_rank_step_seconds", run="fit")) == 2
    for name in ("ringscope_rank_comm_exposed_seconds", "ringscope_rank_comm_exposed_ratio",
                 "ringscope_rank_data_wait_ratio", "ringscope_run_idle_ratio", "ringscope_run_idle_cause_ratio",
                 "ringscope_run_waiting_cost_per_hour", "ringscope_ranks_compute_seconds"):
        assert not find(samples, name), name


def test_finished_run_is_exported_until_it_expires() -> None:
    runs = LiveRuns()
    end = feed(runs, "short", 2, 20, slow=1)
    for r in range(2):
        runs.on_batch(batch(f"short-a{r}", [Event(end, EventKind.FINISHED, r)], 100), end)
    limits = MetricsLimits(keep_ended_s=60.0)
    clock = [end + 1.0]
    collector = LiveRunsCollector(runs, limits=limits, clock=lambda: clock[0])
    samples = scrape(collector)
    assert one(samples, "ringscope_run_state", run="short", state="finished") == 1
    assert one(samples, "ringscope_run_state", run="short", state="running") == 0
    assert one(samples, "ringscope_run_ended_timestamp_seconds", run="short") == pytest.approx(end)
    assert len(find(samples, "ringscope_rank_step_seconds", run="short")) == 2  # frozen figures stay visible
    clock[0] = end + 61.0
    samples = scrape(collector)
    assert not [key for key in samples if dict(key[1]).get("run") == "short"]
    assert one(samples, "ringscope_exporter_runs") == 0


def test_many_ranks_export_percentiles_the_worst_ranks_and_the_straggler() -> None:
    runs = LiveRuns()
    # 40 ranks; rank r waits r ms more than rank 0 (so the worst by stall are the highest ranks); rank 7 straggles
    end = feed(runs, "big", 40, 25, slow=7, stall_of=lambda r: 0.01 + r * 0.001,
               host_of=lambda r: f"node{r // 8}")
    limits = MetricsLimits(max_ranks_per_run=16, top_ranks=4)
    samples = scrape(LiveRunsCollector(runs, limits=limits, clock=lambda: end))
    exported = {dict(key)["rank"] for key in find(samples, "ringscope_rank_comm_exposed_ratio", run="big")}
    assert exported == {"39", "38", "37", "36", "7"}  # top 4 by stall share, plus the straggler
    assert one(samples, "ringscope_run_ranks_exported", run="big") == 5
    assert one(samples, "ringscope_run_ranks", run="big") == 40
    assert one(samples, "ringscope_rank_comm_exposed_seconds", run="big", rank="39", host="node4") == pytest.approx(
        0.049, abs=1e-6)
    assert len(find(samples, "ringscope_ranks_step_seconds", run="big")) == 3
    median = one(samples, "ringscope_ranks_comm_exposed_seconds", run="big", quantile="0.5")
    stall = [0.001 if r == 7 else 0.01 + r * 0.001 for r in range(40)]
    assert median == pytest.approx(float(np.median(stall)), abs=1e-6)


def test_gpus_carry_dcgm_names_and_labels_and_stale_or_missing_readings_are_absent() -> None:
    runs = LiveRuns()
    end = feed(runs, "gpu", 2, 10, host_of=lambda r: "gpu-node")
    full = GpuSample(end, "gpu-node", 0, uuid="GPU-1234", name="NVIDIA H200", rank=0, util_pct=87.0,
                     mem_util_pct=40.0, mem_used_bytes=3 * 2**30, mem_total_bytes=141 * 2**30, power_w=612.5,
                     temp_c=61.0, sm_clock_mhz=1980.0)
    partial = GpuSample(end, "gpu-node", 1, uuid="GPU-5678", name="NVIDIA H200", rank=1, util_pct=12.0)
    stale = GpuSample(end - 120.0, "old-node", 0, uuid="GPU-OLD", util_pct=50.0)
    host = HostSample(end, "gpu-node", 10.0, gpu_count=2, gpu_status=GpuStatus.OK)
    runs.on_batch(batch("gpu-a0", [full, partial, stale, host], 11), end)
    samples = scrape(LiveRunsCollector(runs, clock=lambda: end))
    labels = {"gpu": "0", "UUID": "GPU-1234", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "gpu-node",
              "run": "gpu", "rank": "0"}
    assert one(samples, "DCGM_FI_DEV_GPU_UTIL", **labels) == 87.0
    assert one(samples, "DCGM_FI_DEV_FB_USED", **labels) == 3 * 1024  # MiB, as dcgm-exporter
    assert one(samples, "DCGM_FI_DEV_FB_FREE", **labels) == 138 * 1024
    assert one(samples, "DCGM_FI_DEV_POWER_USAGE", **labels) == 612.5
    assert one(samples, "DCGM_FI_DEV_GPU_TEMP", **labels) == 61.0
    assert one(samples, "DCGM_FI_DEV_SM_CLOCK", **labels) == 1980.0
    assert one(samples, "DCGM_FI_DEV_GPU_UTIL", UUID="GPU-5678") == 12.0
    assert not find(samples, "DCGM_FI_DEV_POWER_USAGE", UUID="GPU-5678")  # the board gave no power reading
    assert not find(samples, "DCGM_FI_DEV_GPU_UTIL", UUID="GPU-OLD")  # two minutes old: nobody's GPU any more
    assert one(samples, "ringscope_gpu_present", host="gpu-node") == 1


def test_ingest_and_recorder_counters() -> None:
    class Recorded:
        rows_written = 1234
        dropped_records = 5

    counters = IngestCounters(messages=10, records=100, bytes=4096, rejected={"oversized": 2, "version": 1},
                              gaps=3, missing_messages=7, agents=4)
    samples = scrape(LiveRunsCollector(LiveRuns(), counters=lambda: counters, recorder=Recorded(),
                                       price_per_gpu_hour=lambda: 4.0))
    assert one(samples, "ringscope_collector_messages_total") == 10
    assert one(samples, "ringscope_collector_rejected_messages_total", reason="oversized") == 2
    assert one(samples, "ringscope_collector_rejected_messages_total", reason="version") == 1
    assert one(samples, "ringscope_collector_missing_messages_total") == 7
    assert one(samples, "ringscope_collector_agents") == 4
    assert one(samples, "ringscope_recorder_rows_written_total") == 1234
    assert one(samples, "ringscope_recorder_dropped_records_total") == 5
    assert one(samples, "ringscope_price_per_device_hour", source="argument") == 4.0
    assert one(samples, "ringscope_exporter_runs") == 0
    assert math.isfinite(one(samples, "ringscope_exporter_collect_seconds"))


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_ranks_per_run"):
        MetricsLimits(max_ranks_per_run=0)


def test_the_grafana_dashboard_is_a_grafana_10_model_over_metrics_the_exporter_emits() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 37 and dashboard["uid"] and dashboard["title"]  # Grafana 10 writes 37-39
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert "ringscope_run_state" in variables["run"]["query"]["query"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert {p["type"] for p in panels} <= {"row", "stat", "timeseries", "heatmap"}
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    heat = [p for p in panels if p["type"] == "heatmap"]
    assert any("ringscope_rank_comm_exposed_ratio" in t["expr"] for p in heat for t in p["targets"])
    assert all(p["options"]["calculate"] is False for p in heat)  # the values are shares per rank, not a histogram
    top = {p["title"] for p in panels if p["gridPos"]["y"] == 1}
    assert {"Idle share", "Main cause", "Straggler", "Cost of waiting"} <= top
    # every metric a query names is one the exporter emits (for a run with a straggler, GPUs and a recorder)
    runs = LiveRuns()
    end = feed(runs, "ddp", 4, 30, slow=2)
    runs.on_batch(batch("ddp-a0", [GpuSample(end, "node0", 0, uuid="GPU-1", util_pct=50.0),
                                   HostSample(end, "node0", 20.0, gpu_count=1, gpu_status=GpuStatus.OK)], 31), end)

    class Recorded:
        rows_written = 1
        dropped_records = 0

    counters = IngestCounters(rejected={"oversized": 1})
    emitted = {name for name, _ in scrape(LiveRunsCollector(runs, counters=lambda: counters, recorder=Recorded(),
                                                              clock=lambda: end))}
    named = {name for p in panels if p["type"] != "row" for t in p["targets"]
             for name in re.findall(r"\b(?:ringscope_[a-z_]+|DCGM_FI_[A-Z_]+)\b", t["expr"])}
    named.add(variables["run"]["query"]["query"].split("(")[1].split(",")[0])
    assert named and named <= emitted, named - emitted
