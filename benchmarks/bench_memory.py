"""Memory of the live state after a simulated hour at 1024 ranks, and what each ingest sink costs per record.

    python -m benchmarks memory [--quick]

Issues: "RSS <= 2 GB after a simulated hour at 1024 ranks" and "recorder cost per record at 1024 ranks". A child
process (its RSS is that of a process holding only this state, not the benchmark driver's earlier topics) builds
the collector's sinks, a ``LiveRuns`` and a ``Recorder`` writing a real session file in a temporary folder, and
feeds them a simulated run as ``ringscope.gui.core.ingest.collector`` does: each message is decoded with
``ringscope.agent.wire.decode`` and handed to each sink's ``on_batch(batch, recv_s)`` in turn. The messages come from a
second process playing the agents (one per rank), as real agents run elsewhere: ``ringscope.agent.schema`` records
encoded
with ``ringscope.agent.wire`` as ``ringscope.agent.publisher`` batches them (Hello first and every 5 s, the steps, one
GpuSample per
rank and one HostSample per host every 5 s, Health last, started / checkpoint / finished events). Simulated time
drives every timestamp (``recv_s`` is the send time plus 2 ms), so an hour takes minutes. Every 10 simulated
seconds the runs table and a snapshot are built as the window's timer would; the last 6 snapshots stay alive, as
the views keep theirs (an upper estimate: 10 s apart they share no GPU series, 30 Hz frames share most).

Feeding every step (1024 ranks x 10 steps/s x 1 h = 36.9 M) would take the collector's process ~25 µs CPU each
(decode ~6, LiveRuns ~8, the recorder's writer ~10, all sharing one GIL: ~15 min on this 2-core machine; the
agents' encoding runs in their own process). So the full run feeds every step only in the first and last simulated
minute ("dense": the per-record costs at 1024 ranks x 10 steps/s come from these) and every 10th step, Health and
Hello in between ("thinned": 1 step/s, one message per agent per second, step numbers and timestamps those of the
10 steps/s run; device samples stay every 5 s). The live state is bounded by its ring sizes, not by the rate, so
the RSS it reaches is that of the full-rate run; the file is not. RSS grows until each GPU's series holds its 600
readings (50 min at one sample per 5 s; 5 min at the agents' real 0.5 s) and the snapshots' copies of them with it.

The feed waits whenever the recorder's writer lags by more than ``BACKLOG_RECORDS`` (~10 MB queued; in real time
~0.2 s of records), so the feed's speed does not inflate the queue. CPU per record: ``time.thread_time`` around
each call (~0.6 µs a call, part of it inside the window) and the writer thread's own CPU clock for the recorder's
writes (``Recorder.on_batch`` only queues).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Final

import numpy as np

from ringscope.agent import wire
from ringscope.agent.schema import (
    AGENT_VERSION,
    Event,
    EventKind,
    GpuSample,
    GpuStatus,
    Health,
    Hello,
    HostSample,
    Record,
    Step,
    schema_version_str,
)
from ringscope.agent.simulate import COMPUTE_SHARE, DATA_SHARE, JITTER_SHARE, OTHER_SHARE, OVERLAP_SHARE, TAIL_SHARE
from ringscope.gui.core.ingest import gc_policy
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.live.runs import LiveRuns

ROOT: Final = Path(__file__).resolve().parents[1]
RUN_ID: Final = "bench-memory"
RANKS_PER_HOST: Final = 8
TICK_S: Final = 0.5  # an agent sends at most one message per tick
HELLO_EVERY_S: Final = 5  # the publisher's hello_interval_s
HEALTH_EVERY_S: Final = 1  # the publisher's health_interval_s
DEVICES_EVERY_S: Final = 5  # one GpuSample per rank, one HostSample per host
CHECKPOINT_EVERY_STEPS: Final = 200
TRANSIT_S: Final = 0.002
FRAME_EVERY_S: Final = 10  # runs table + snapshot, simulated seconds
SNAPSHOTS_KEPT: Final = 6
BACKLOG_RECORDS: Final = 32_000
"""Records the recorder's writer may lag behind the feed (~10 MB queued; it wakes by itself at 8 MB)."""
BUDGET_MB: Final = 2048.0
_TRAILER: Final = 0xFFFFFFFF
_STAGES: Final = ("decode", "runs", "recorder", "writer", "records", "messages")


@dataclass(frozen=True, slots=True)
class Scenario:
    """What is simulated: ``ranks`` x ``steps_per_s`` for ``duration_s``. Every step, Hello and Health of the first
    and last ``dense_s`` seconds is fed, every ``thin``-th in between; RSS is reported after ``marks_s`` seconds."""

    ranks: int
    duration_s: int
    dense_s: int
    thin: int
    marks_s: tuple[int, ...]
    steps_per_s: int = 10

    def dense(self, at_s: float) -> bool:
        """Whether simulated second ``at_s`` lies in a part fed at the full rate."""
        return at_s < self.dense_s or at_s >= self.duration_s - self.dense_s

    def fed(self, step: int) -> bool:
        """Whether step ``step`` (0-based) is handed to the sinks."""
        return self.dense(step / self.steps_per_s) or (step + 1) % self.thin == 0

    def due(self, second: int, every_s: int) -> bool:
        """Whether an agent's record sent every ``every_s`` seconds (Hello, Health) is handed on at the end of
        simulated second ``second`` (1-based): every one where steps are dense, every ``thin``-th in between."""
        return second % (every_s if self.dense(second - 1) else every_s * self.thin) == 0

    def described(self, steps_fed: int) -> str:
        """The feed in words, for the notes."""
        every = self.duration_s * self.steps_per_s * self.ranks
        if 2 * self.dense_s < self.duration_s:
            fed = (f"every step in the first and last {self.dense_s / 60:g} simulated min, every {self.thin}th (1 "
                   f"step/s) in between")
            periodic = "Hello/agent every 5 s and Health/agent every 1 s (50 s and 10 s when thinned)"
            messages = "1 message per agent per 0.5 s (1 s when thinned)"
        else:
            fed, periodic = "every step", "Hello/agent every 5 s, Health/agent every 1 s"
            messages = "1 message per agent per 0.5 s"
        return (f"{self.ranks} ranks (1 agent each) x {self.steps_per_s} steps/s x {self.duration_s / 60:g} "
                f"simulated min; fed {fed}: {steps_fed:,} of {every:,} steps; + {periodic}, GpuSample/rank and "
                f"HostSample/host every {DEVICES_EVERY_S} s throughout, started/checkpoint/finished events; "
                f"{messages}")


QUICK: Final = Scenario(ranks=64, duration_s=300, dense_s=300, thin=10, marks_s=(60, 150, 300))
FULL: Final = Scenario(ranks=1024, duration_s=3600, dense_s=60, thin=10, marks_s=(600, 1800, 3600))


# ---- Driver (the benchmark process) ------------------------------------------------------------------------------


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Quick: 64 ranks x 5 simulated minutes, every step. Full: 1024 ranks x a simulated hour, thinned (see the
    module docstring). The child's progress goes to stderr."""
    scenario = QUICK if quick else FULL
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "--child", json.dumps(asdict(scenario))],
                          cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory benchmark child exited with {done.returncode}; its errors are above")
    return _rows(scenario, json.loads(done.stdout.strip().splitlines()[-1]))


def _rows(scenario: Scenario, r: dict[str, Any]) -> list[dict[str, Any]]:
    phases: dict[str, dict[str, float]] = r["phases"]
    dense, total = phases["dense"], {k: sum(p[k] for p in phases.values()) for k in _STAGES}
    size = f"{scenario.ranks} ranks x {scenario.steps_per_s} steps/s"

    def row(metric: str, value: float, unit: str, note: str) -> dict[str, Any]:
        return {"benchmark": "memory", "metric": metric, "value": float(value), "unit": unit, "note": note}

    def us(phase: dict[str, float], stage: str) -> float:
        return phase[stage] / max(1.0, phase["records"]) * 1e6

    def elsewhere(stage: str) -> str:
        thinned = phases["thinned"]
        return (f"; thinned part {us(thinned, stage):.2f}, whole run {us(total, stage):.2f} µs"
                if thinned["records"] else "")

    series = ", ".join(f"{minute}:{mb:.0f}" for minute, mb in r["rss_by_minute"])
    rows = [row(f"VmRSS after {mark / 60:g} simulated min", r["rss_at_marks"][str(mark)], "MB",
                f"child holding LiveRuns + Recorder; {r['rss_baseline_mb']:.0f} MB after imports, before any state")
            for mark in scenario.marks_s]
    dense_cpu = dense["runs"] + dense["recorder"] + dense["writer"]
    rows += [
        row("VmRSS at end (state held)", r["rss_end_mb"], "MB",
            f"{'within' if r['rss_end_mb'] <= BUDGET_MB else 'OVER'} the {BUDGET_MB:.0f} MB budget; of it the "
            f"{SNAPSHOTS_KEPT} kept snapshots' GPU series {r['snapshot_gpu_mb']:.0f} MB; MB by simulated minute: "
            f"{series}"),
        row("VmHWM at end", r["hwm_end_mb"], "MB",
            f"peak RSS while feeding; {r['hwm_closed_mb']:.0f} MB after the recorder's close (indexes built in "
            f"{r['close_s']:.1f} s)"),
        row("records fed", total["records"], "records",
            f"{scenario.described(r['steps_fed'])}; {total['messages']:,.0f} messages; the runs table then "
            f"showed: {'; '.join(r['runs_table'])}"),
        row(f"{size}: records/s through LiveRuns + Recorder", dense["records"] / dense_cpu, "records/s",
            f"per CPU second of both sinks incl. the writer thread, fed at the full rate ({dense['records']:,.0f} "
            f"records); the whole feed ran at {total['records'] / r['feed_wall_s']:,.0f} records/s wall"),
        row(f"{size}: LiveRuns CPU per record", us(dense, "runs"), "µs CPU", "on_batch" + elsewhere("runs")),
        row(f"{size}: Recorder CPU per record (on_batch)", us(dense, "recorder"), "µs CPU",
            f"collector thread, queues only{elsewhere('recorder')}; writer lagged <= {r['max_backlog']:,} records"),
        row(f"{size}: Recorder CPU per record (writer)", us(dense, "writer"), "µs CPU",
            f"writer thread: convert + SQLite + step blocks, close excluded{elsewhere('writer')}; "
            f"{dense['records'] / max(1.0, dense['messages']):.1f} records per message"),
        row(f"{size}: decode CPU per record", us(dense, "decode"), "µs CPU",
            f"ringscope.agent.wire.decode{elsewhere('decode')}; the agents' process spent {r['encode_cpu_s']:.0f} s "
            "building + encoding"),
        row("window frame (runs table + snapshot)", r["frame_ms"], "ms CPU",
            f"mean of {r['frames']} frames, one per {FRAME_EVERY_S} simulated s"),
        row("session file size", r["file_bytes"] / 1e6, "MB",
            f"after close: {r['file_bytes'] / max(1.0, total['records']):.0f} B per record"),
        row("recorder write_errors", r["write_errors"], "rows",
            f"must be 0; recorder dropped {r['dropped_records']} records; {r['rows_written']:,} rows written"),
    ]
    return rows


# ---- The simulated agents (their own process) --------------------------------------------------------------------


class _Cluster:
    """One agent per rank: what each sends per tick, encoded as ``ringscope.agent.publisher`` would (Hello first, Health
    last). The step model is ``ringscope.agent.simulate``'s, on a fixed grid of ``steps_per_s`` steps a second."""

    def __init__(self, scenario: Scenario, t0: float) -> None:
        self.scenario = scenario
        self.t0 = t0
        self.period_s = 1.0 / scenario.steps_per_s
        self.steps_per_tick = round(TICK_S * scenario.steps_per_s)
        self.hellos = [self._hello(rank) for rank in range(scenario.ranks)]
        self.seq = [0] * scenario.ranks
        self.sent = [0] * scenario.ranks
        self.rng = np.random.default_rng(20_240_601)
        self.steps_fed = 0

    def _hello(self, rank: int) -> Hello:
        host = f"sim-node-{rank // RANKS_PER_HOST:04d}"
        return Hello(run_id=RUN_ID, agent_id=f"{host}:{40_000 + rank}:{rank:08x}", host=host, pid=40_000 + rank,
                     rank=rank, local_rank=rank % RANKS_PER_HOST, world_size=self.scenario.ranks,
                     node_rank=rank // RANKS_PER_HOST, ranks=[rank], framework="simulated", strategy="simulated",
                     backend="nccl", devices=[{"index": rank % RANKS_PER_HOST, "name": "Simulated GPU",
                                               "uuid": f"SIM-GPU-{rank:05d}", "simulated": True}],
                     agent_version=AGENT_VERSION, schema_version=schema_version_str(), clock_wall_s=self.t0,
                     clock_mono_s=1000.0, started_s=self.t0)

    @property
    def ticks(self) -> int:
        """Ticks of the whole run."""
        return round(self.scenario.duration_s / TICK_S)

    def messages(self, tick: int) -> list[bytes]:
        """Every agent's message of this tick (agents with nothing to send send nothing)."""
        ts = self.t0 + (tick + 1) * TICK_S
        end = (tick + 1) * TICK_S
        second = int(end) if end == int(end) else 0  # a whole second ends with this tick
        numbers = range(tick * self.steps_per_tick, (tick + 1) * self.steps_per_tick)
        steps = [self._steps(k) for k in numbers if self.scenario.fed(k)]
        hello_due = tick == 0 or (second and self.scenario.due(second, HELLO_EVERY_S))
        devices_due = second and second % DEVICES_EVERY_S == 0
        checkpoint = any(k and k % CHECKPOINT_EVERY_STEPS == 0 for k in numbers)
        health_due = second and self.scenario.due(second, HEALTH_EVERY_S)
        last = tick == self.ticks - 1
        out = []
        for rank, hello in enumerate(self.hellos):
            records: list[Record] = []
            if hello_due:
                hello.clock_wall_s, hello.clock_mono_s = ts, 1000.0 + ts - self.t0
                records.append(hello)
            if tick == 0:
                records.append(Event(ts_s=self.t0, event=EventKind.STARTED, rank=rank))
            records += [step[rank] for step in steps]
            if devices_due:
                records += self._devices(rank, ts)
            if checkpoint and rank == 0:
                records.append(Event(ts_s=ts, event=EventKind.CHECKPOINT_SAVED, rank=0, duration_s=0.8,
                                     bytes=1_400_000_000, text="simulated checkpoint"))
            if last:
                records.append(Event(ts_s=ts, event=EventKind.FINISHED, rank=rank))
            if health_due:
                records.append(Health(ts_s=ts, queue_len=0, queue_capacity=65_536, dropped_records=0,
                                      sent_records=self.sent[rank], sent_batches=self.seq[rank], failed_batches=0,
                                      last_seq=self.seq[rank] - 1, disconnects=0))
            if records:
                out.append(wire.encode(hello.agent_id, self.seq[rank], ts, records))
                self.seq[rank] += 1
                self.sent[rank] += len(records)
        self.steps_fed += len(steps) * len(self.hellos)
        return out

    def _steps(self, k: int) -> list[Step]:
        """Step ``k`` of every rank: a synchronous all-reduce, so all end together (``ringscope.agent.simulate``'s
        model)."""
        period = self.period_s
        compute = COMPUTE_SHARE * period + self.rng.random(self.scenario.ranks) * JITTER_SHARE * period
        arrive = DATA_SHARE * period + compute
        exposed = arrive.max() - arrive + TAIL_SHARE * period
        step_s = float(arrive.max()) + (TAIL_SHARE + OTHER_SHARE) * period  # <= period: the grid holds
        start = self.t0 + k * period
        loss = 2.5 * math.exp(-k / 500.0) + 0.1
        return [Step(rank, k, start, start + step_s, step_s, DATA_SHARE * period, c, e + OVERLAP_SHARE * period, e,
                     32, loss, 4, 25 * 1024 * 1024, k == 0)
                for rank, (c, e) in enumerate(zip(compute.tolist(), exposed.tolist(), strict=True))]

    def _devices(self, rank: int, ts: float) -> list[Record]:
        host = self.hellos[rank].host
        samples: list[Record] = [GpuSample(
            ts_s=ts, host=host, gpu_index=rank % RANKS_PER_HOST, uuid=f"SIM-GPU-{rank:05d}", name="Simulated GPU",
            rank=rank, util_pct=72.0, mem_util_pct=43.0, mem_used_bytes=60 * 2**30, mem_total_bytes=80 * 2**30,
            power_w=465.0, energy_j=None, temp_c=69.4, sm_clock_mhz=1980.0, throttle_reasons=0)]
        if rank % RANKS_PER_HOST == 0:
            samples.append(HostSample(ts_s=ts, host=host, cpu_pct=35.0, mem_used_bytes=400 * 2**30,
                                      mem_total_bytes=2048 * 2**30, process_cpu_pct=100.0,
                                      process_rss_bytes=12 * 2**30, gpu_count=RANKS_PER_HOST,
                                      gpu_status=GpuStatus.OK, gpu_status_detail="simulated GPUs"))
        return samples


def _agents_main(scenario: Scenario, t0: float) -> None:
    """Write every tick's messages to stdout: (count, bytes), the lengths, the messages; then a JSON trailer."""
    cluster = _Cluster(scenario, t0)
    out = sys.stdout.buffer
    for tick in range(cluster.ticks):
        messages = cluster.messages(tick)
        payload = b"".join(messages)
        out.write(struct.pack(f"<II{len(messages)}I", len(messages), len(payload), *map(len, messages)))
        out.write(payload)
    trailer = json.dumps({"steps_fed": cluster.steps_fed, "encode_cpu_s": time.process_time()}).encode()
    out.write(struct.pack("<II", _TRAILER, len(trailer)) + trailer)
    out.flush()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise RuntimeError(f"the simulated agents' process ended early ({len(data)} of {size} bytes); its errors "
                           "are above")
    return data


def _read_tick(stream: IO[bytes]) -> list[bytes] | dict[str, Any]:
    """One tick's messages, or the trailer (a dict) after the last tick."""
    count, size = struct.unpack("<II", _read_exactly(stream, 8))
    if count == _TRAILER:
        return dict(json.loads(_read_exactly(stream, size)))
    lengths = struct.unpack(f"<{count}I", _read_exactly(stream, 4 * count))
    payload = _read_exactly(stream, size)
    return [payload[a:b] for a, b in itertools.pairwise(itertools.accumulate(lengths, initial=0))]


# ---- The measured process ----------------------------------------------------------------------------------------


def _memory_mb() -> dict[str, float]:
    """VmRSS and VmHWM of this process, MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024.0
    return out


def _writer_cpu() -> Callable[[], float]:
    """A function returning the recorder's writer thread's CPU seconds so far (NaN where it cannot be read)."""
    thread = next((t for t in threading.enumerate() if t.name == "ringscope-recorder"), None)
    try:
        clock = time.pthread_getcpuclockid(thread.ident) if thread is not None and thread.ident else None
    except (AttributeError, OSError):
        clock = None
    return (lambda: time.clock_gettime(clock)) if clock is not None else (lambda: math.nan)


def _deliver(messages: list[bytes], runs: LiveRuns, recorder: Recorder, meter: dict[str, float]) -> None:
    """Decode each message and hand it to both sinks, as the collector's receive thread does; CPU per stage."""
    decode, clock = wire.decode, time.thread_time
    decoding = routing = queueing = 0.0
    records = 0
    after = clock()
    for data in messages:
        batch = decode(data)
        decoded = clock()
        recv_s = batch.sent_s + TRANSIT_S
        runs.on_batch(batch, recv_s)
        routed = clock()
        recorder.on_batch(batch, recv_s)
        queued = clock()
        decoding += decoded - after  # the loop's own few steps land here
        routing += routed - decoded
        queueing += queued - routed
        records += len(batch.records)
        after = queued
    meter["decode"] += decoding
    meter["runs"] += routing
    meter["recorder"] += queueing
    meter["records"] += records
    meter["messages"] += len(messages)


def _pace(recorder: Recorder, records: float, allowed: int, timeout_s: float = 120.0) -> int:
    """Wait while the writer lags more than ``allowed`` records behind; returns the lag seen before waiting."""
    lag = int(records) - recorder.rows_written - recorder.dropped_records
    deadline = time.monotonic() + timeout_s
    while records - recorder.rows_written - recorder.dropped_records > allowed and time.monotonic() < deadline:
        time.sleep(0.005)
    return lag


def _frame(runs: LiveRuns, now: float, snapshots: deque[Any]) -> None:
    """What the window's timer does: the runs table, then the selected run's snapshot (kept alive)."""
    runs.rows(now)
    store = runs.store(RUN_ID)
    if store is not None:
        snapshots.append(store.snapshot(now))


def _gpu_series_mb(snapshots: deque[Any]) -> float:
    """Memory of the GPU series arrays the kept snapshots hold (shared arrays counted once)."""
    arrays = {id(a): a.nbytes for snap in snapshots for gpu in snap.gpus
              for a in (gpu.ts_s, gpu.util_pct, gpu.mem_used_bytes)}
    return sum(arrays.values()) / 1e6


def _feed(scenario: Scenario) -> dict[str, Any]:
    """The measured run, with the agents' process feeding it; what ``_rows`` reports."""
    gc_policy.tune_for_ingest()  # collect as the ingest process does
    baseline = _memory_mb()["VmRSS"]  # everything imported, no state yet
    t0 = float(int(time.time()) - scenario.duration_s)  # the simulated run ends about now
    agents = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_memory", "--agents",
                               json.dumps(asdict(scenario)), "--t0", repr(t0)], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert agents.stdout is not None
        result = _measure(scenario, t0, agents.stdout)
        agents.wait(60)
    finally:
        if agents.poll() is None:
            agents.kill()
            agents.wait(10)
    return {**result, "rss_baseline_mb": baseline}


def _measure(scenario: Scenario, t0: float, stream: IO[bytes]) -> dict[str, Any]:
    """Feed the sinks tick by tick from ``stream``; RSS, CPU per stage and phase, what the recorder wrote."""
    result: dict[str, Any] = {"rss_by_minute": [], "rss_at_marks": {}}
    phases = {name: dict.fromkeys(_STAGES, 0.0) for name in ("dense", "thinned")}
    snapshots: deque[Any] = deque(maxlen=SNAPSHOTS_KEPT)
    frame_cpu, frames, max_backlog, phase, records = 0.0, 0, 0, "", 0.0
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as folder:
        recorder = Recorder(Path(folder) / "session.db").start()
        runs = LiveRuns()
        writer_cpu = _writer_cpu()
        writer_mark = writer_cpu()
        started = time.monotonic()
        for tick in range(round(scenario.duration_s / TICK_S)):
            messages = _read_tick(stream)
            assert isinstance(messages, list)
            now_phase = "dense" if scenario.dense(tick * TICK_S) else "thinned"
            if now_phase != phase:  # the writer's CPU is told apart per phase: let it finish the previous one
                writer_mark = _settle(recorder, records, writer_cpu, writer_mark, phases.get(phase))
                phase = now_phase
            _deliver(messages, runs, recorder, phases[phase])
            records = sum(p["records"] for p in phases.values())
            max_backlog = max(max_backlog, _pace(recorder, records, BACKLOG_RECORDS))
            end = (tick + 1) * TICK_S
            if end % FRAME_EVERY_S == 0:
                before = time.thread_time()
                _frame(runs, t0 + end + TRANSIT_S, snapshots)
                frame_cpu += time.thread_time() - before
                frames += 1
            if end % 60 == 0 or end in scenario.marks_s:
                _mark(result, scenario, int(end), records, started)
        _settle(recorder, records, writer_cpu, writer_mark, phases[phase])
        trailer = _read_tick(stream)
        assert isinstance(trailer, dict)
        feed_wall = time.monotonic() - started
        table = runs.rows(t0 + scenario.duration_s + 1.0)
        shown = [f"{row.state}, {row.ranks} ranks, {row.steps:,} steps" for row in table]
        memory = _memory_mb()
        closing = time.monotonic()
        recorder.close(600.0)
        result.update(
            phases=phases, runs_table=shown, steps_fed=trailer["steps_fed"], encode_cpu_s=trailer["encode_cpu_s"],
            feed_wall_s=feed_wall, rss_end_mb=memory["VmRSS"], hwm_end_mb=memory["VmHWM"],
            snapshot_gpu_mb=_gpu_series_mb(snapshots), close_s=time.monotonic() - closing,
            hwm_closed_mb=_memory_mb()["VmHWM"], frame_ms=frame_cpu / max(1, frames) * 1e3, frames=frames,
            max_backlog=max_backlog, file_bytes=recorder.file_bytes, write_errors=recorder.write_errors,
            dropped_records=recorder.dropped_records, rows_written=recorder.rows_written)
    return result


def _settle(recorder: Recorder, records: float, writer_cpu: Callable[[], float], mark: float,
            meter: dict[str, float] | None) -> float:
    """Let the writer catch up, charge its CPU since ``mark`` to ``meter``; returns the new mark."""
    _pace(recorder, records, 0)
    now = writer_cpu()
    if meter is not None:
        meter["writer"] += now - mark
    return float(now)


def _mark(result: dict[str, Any], scenario: Scenario, second: int, records: float, started: float) -> None:
    """RSS once a simulated minute (and at the marks); progress on stderr."""
    rss = _memory_mb()["VmRSS"]
    if second % 60 == 0:
        result["rss_by_minute"].append((second // 60, rss))
    if second in scenario.marks_s:
        result["rss_at_marks"][str(second)] = rss
    if second % 300 == 0 or second in scenario.marks_s or (scenario.duration_s <= 600 and second % 60 == 0):
        print(f"  memory: {second / 60:4g} / {scenario.duration_s / 60:g} simulated min, VmRSS {rss:6.0f} MB, "
              f"{records:,.0f} records in {time.monotonic() - started:5.1f} s", file=sys.stderr, flush=True)


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the processes of benchmarks.bench_memory")
    role = parser.add_mutually_exclusive_group(required=True)
    role.add_argument("--child", metavar="SCENARIO", help="measure: feed the sinks (JSON Scenario)")
    role.add_argument("--agents", metavar="SCENARIO", help="play the agents: messages to stdout (JSON Scenario)")
    parser.add_argument("--t0", type=float, default=0.0, help="the simulated run's start (with --agents)")
    args = parser.parse_args(argv)
    fields = json.loads(args.child or args.agents)
    scenario = Scenario(**{**fields, "marks_s": tuple(fields["marks_s"])})
    if args.agents:
        _agents_main(scenario, args.t0)
    else:
        print(json.dumps(_feed(scenario)), flush=True)


if __name__ == "__main__":
    _main()
