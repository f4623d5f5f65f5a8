"""A synthetic data-parallel cluster that reports through the real agent code path (``agent.start`` -> ``Agent``).

What it owns: a deterministic model of a synchronous data-parallel step (shared MEASURING.md) and the processes
that replay it in real time. Every rank group is a real ``Agent`` with its own ``Publisher`` and socket, so the
collector, recorder and views see exactly what real trainings send. Everything it sends says it is simulated
(``framework="simulated"`` in ``Hello``, GPU names "Simulated GPU").

The step model (per step k, every rank r):

* ``data_wait_s`` = 5 % of the period (+ ``data_stall_ms`` on every rank: an input-bound cluster);
* ``compute_s`` = 70 % of the period +0..3 % per-rank jitter (+ the straggler's extra ms on the straggler);
* the all-reduce completes when the last rank arrives plus an unhidden tail (18 %): every rank's step ends at the
  same time, ``comm_exposed_s`` = (last arrival - own arrival) + tail, so the straggler has the smallest stall and
  everybody else's grows by about the straggler's extra time; ``comm_s`` adds the overlapped part (25 %).
* GPU utilization = compute share of the step, so it drops when a rank waits; checkpoints are ``checkpoint_saved``
  events from rank 0.

What it must never do: import torch/tensorflow/Qt, or pretend to be a real GPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ringscope.agent.keys import ENV_KEY, AgentKeys
from ringscope.agent.runtime import Agent, start
from ringscope.agent.schema import EventKind, GpuSample, GpuStatus, HostSample

log = logging.getLogger(__name__)

DATA_SHARE: Final[float] = 0.05
COMPUTE_SHARE: Final[float] = 0.70
JITTER_SHARE: Final[float] = 0.03
TAIL_SHARE: Final[float] = 0.18
OVERLAP_SHARE: Final[float] = 0.25
OTHER_SHARE: Final[float] = 0.04
RANKS_PER_HOST: Final[int] = 8
GPU_INTERVAL_S: Final[float] = 0.5
HOST_INTERVAL_S: Final[float] = 1.0
CHECKPOINT_EVERY_STEPS: Final[int] = 200
MAX_STEPS_PER_SECOND: Final[float] = 10_000.0
RANKS_PER_PROCESS: Final[int] = 256
"""How many ranks one simulator process drives before another process is added (up to ``MAX_PROCESSES``)."""
MAX_PROCESSES: Final[int] = max(2, 2 * (os.cpu_count() or 1))
"""Most simulator processes by default: beyond this, ranks per process (and per agent) grow instead. One per 256
ranks made 32 processes at 8 192 ranks on 2 cores, ~6 000 threads that took both cores from the collector under
test (it got 1.4 % of one); 4 processes drive 16 384 ranks x 1 step/s with 0 loss into ``ringscope record``."""
MAX_AGENTS_PER_PROCESS: Final[int] = 64
"""Each agent is a sender thread plus a ZeroMQ context (2 more threads); beyond this, agents report several ranks
(``Hello.ranks``). Measured on 2 cores, 1024 ranks x 100 steps/s for 5 s in 4 processes: one agent per rank
(1024 agents) managed 21 steps/s and 38 s of simulator CPU; 4 ranks per agent (256 agents) kept 99.9 steps/s with
4.9 s of CPU, zero loss either way."""
_SEED: Final[int] = 20_240_601


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What a simulation sent. ``records_put`` counts records handed to agents; ``dropped_records`` those the
    agents had to drop (queue full / no collector), from their own counters."""

    run_id: str
    ranks: int
    processes: int
    agents: int
    steps: int
    step_records: int
    records_put: int
    sent_records: int
    dropped_records: int
    elapsed_s: float
    """Wall time of the whole call, including starting processes and agents."""
    run_s: float
    """Wall time from the first step's start to the last step's end (the paced part)."""
    problems: tuple[str, ...] = ()
    """What went wrong, in words: a simulator process that died, or nothing delivered (no collector took a
    single message within ``give_up_after_s``). Empty when the simulation ran as asked."""

    @property
    def steps_per_second(self) -> float:
        """Achieved steps per second per rank, over the paced part."""
        return self.steps / self.run_s if self.run_s > 0 else 0.0

    @property
    def delivered(self) -> bool:
        """True when a collector took at least one record."""
        return self.sent_records > 0

    @property
    def ok(self) -> bool:
        """True when every simulator process finished and something was delivered."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class _Config:
    ranks: int
    first_rank: int
    last_rank: int  # exclusive
    endpoint: str
    period_s: float
    steps: int | None
    straggler: tuple[int, float] | None
    data_stall_s: float
    run_id: str
    ranks_per_agent: int
    give_up_after_s: float | None = None


# ---- Public API --------------------------------------------------------------------------------------------------


def run_cluster(
    ranks: int,
    *,
    endpoint: str,
    steps_per_second: float = 10,
    duration_s: float | None = None,
    steps: int | None = None,
    straggler: tuple[int, float] | None = None,
    data_stall_ms: float = 0.0,
    run_id: str | None = None,
    stop: threading.Event | None = None,
    processes: int | None = None,
    ranks_per_agent: int | None = None,
    keys: AgentKeys | None = None,
    give_up_after_s: float | None = None,
) -> SimulationResult:
    """Simulate ``ranks`` synchronous data-parallel ranks sending to ``endpoint``; returns when done or stopped.

    Args:
        steps_per_second: target step rate of the cluster (a straggler or data stall makes steps longer).
        duration_s / steps: when to stop (both None: run until ``stop`` is set).
        straggler: ``(rank, extra_ms)``: that rank computes ``extra_ms`` longer every step.
        data_stall_ms: extra data-loader wait on every rank and step.
        processes: simulator processes (default: one per 256 ranks); 0 runs in this process (threads).
        ranks_per_agent: ranks reported by one agent (default 1, more only past 64 agents per process).
        keys: access keys of a collector that requires authentication (default: ``RINGSCOPE_KEY`` as any agent).
        give_up_after_s: stop early when no collector has taken a single message this long after the first step
            (the result's ``problems`` says so); None waits for a collector as long as the simulation runs.

    A simulator process that dies stops the whole simulation (a synchronous cluster cannot go on without a rank);
    the result's ``problems`` names it.
    """
    _validate(ranks, steps_per_second, duration_s, steps, straggler, data_stall_ms, give_up_after_s)
    if processes is None:
        processes = max(1, min(math.ceil(ranks / RANKS_PER_PROCESS), MAX_PROCESSES))
    workers = max(1, processes)
    if ranks_per_agent is None:
        ranks_per_agent = max(1, math.ceil(ranks / workers / MAX_AGENTS_PER_PROCESS))
    run_id = run_id or f"sim-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    bounds = [round(i * ranks / workers) for i in range(workers + 1)]
    configs = [
        _Config(ranks, bounds[i], bounds[i + 1], endpoint, 1.0 / steps_per_second, steps, straggler,
                data_stall_ms / 1000.0, run_id, ranks_per_agent, give_up_after_s)
        for i in range(workers) if bounds[i + 1] > bounds[i]
    ]
    stop = stop or threading.Event()
    started = time.monotonic()
    problems: list[str] = []
    if processes == 0:
        totals = [_run_in_thread(configs[0], duration_s, stop, keys)]
    else:
        totals, problems = _run_in_processes(configs, duration_s, stop, keys)
    if any(t.get("gave_up") for t in totals):
        problems.append(f"nothing delivered: no collector took a single message at {endpoint} within "
                        f"{give_up_after_s:g} s of the first step")
    elif totals and not problems and sum(t["sent_records"] for t in totals) == 0:
        problems.append(f"nothing delivered: no collector took a single message at {endpoint}")
    elapsed = time.monotonic() - started
    return SimulationResult(
        run_id=run_id,
        ranks=ranks,
        processes=processes,
        agents=sum(t["agents"] for t in totals),
        steps=min((t["steps"] for t in totals), default=0),
        step_records=sum(t["step_records"] for t in totals),
        records_put=sum(t["records_put"] for t in totals),
        sent_records=sum(t["sent_records"] for t in totals),
        dropped_records=sum(t["dropped_records"] for t in totals),
        elapsed_s=elapsed,
        run_s=max((t["run_s"] for t in totals), default=0.0),
        problems=tuple(problems),
    )


def parse_straggler(text: str) -> tuple[int, float]:
    """Parse ``RANK:MS`` (e.g. ``3:40``). Raises ``ValueError`` with a message a user can act on."""
    rank_text, sep, ms_text = text.partition(":")
    if not sep:
        raise ValueError(f"--straggler expects RANK:MS (e.g. 3:40), got {text!r}")
    try:
        rank, extra_ms = int(rank_text), float(ms_text)
    except ValueError:
        raise ValueError(f"--straggler expects an integer rank and a number of ms (e.g. 3:40), got {text!r}") from None
    if rank < 0 or not math.isfinite(extra_ms) or extra_ms < 0:
        raise ValueError(f"--straggler rank must be >= 0 and ms a finite number >= 0, got {text!r}")
    return rank, extra_ms


# ---- The step model ----------------------------------------------------------------------------------------------


def step_phases(config: _Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Phase durations (seconds) of one step for every rank of the cluster; the same in every process."""
    period = config.period_s
    jitter = rng.random(config.ranks) * JITTER_SHARE * period
    data_wait = np.full(config.ranks, DATA_SHARE * period + config.data_stall_s)
    compute = COMPUTE_SHARE * period + jitter
    if config.straggler is not None:
        compute[config.straggler[0]] += config.straggler[1] / 1000.0
    arrive = data_wait + compute
    tail = TAIL_SHARE * period
    exposed = (arrive.max() - arrive) + tail
    step = arrive + exposed + OTHER_SHARE * period  # equal for every rank: synchronous all-reduce
    return {"data_wait": data_wait, "compute": compute, "exposed": exposed, "comm": exposed + OVERLAP_SHARE * period,
            "step": step}


# ---- Workers -----------------------------------------------------------------------------------------------------


def _run_in_thread(config: _Config, duration_s: float | None, stop: threading.Event,
                   keys: AgentKeys | None) -> dict[str, Any]:
    agents = _start_agents(config, keys)
    end_wall = None if duration_s is None else time.time() + duration_s
    return _drive(config, agents, time.time(), end_wall, stop)


def _run_in_processes(configs: Sequence[_Config], duration_s: float | None, stop: threading.Event,
                      keys: AgentKeys | None) -> tuple[list[dict], list[str]]:
    """One ``python -m ringscope.agent.simulate`` child per config, driven over stdin/stdout lines. Returns the
    children's outcomes and, in words, the children that died (their death stops the others).

    Plain subprocesses rather than multiprocessing: "spawn" re-imports the caller's ``__main__`` (breaking
    unguarded scripts) and "fork" would copy a process that holds ZeroMQ sockets and threads.
    """
    env = None if keys is None else dict(os.environ, **{ENV_KEY: keys.token})  # environment, not argv: ps shows argv
    children = [
        subprocess.Popen([sys.executable, "-m", "ringscope.agent.simulate", json.dumps(dataclasses.asdict(c))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
        for c in configs
    ]
    totals: list[dict] = []
    started_at = time.time()
    try:
        for child in children:
            line = _read_line(child, deadline_s=120.0, stop=stop)
            if line != "ready":
                raise RuntimeError(f"simulator process {child.pid} failed to start (said {line!r}); see its errors")
        # One shared origin so every process's rank steps end at the same instants.
        start_at = time.time() + 0.2
        started_at = start_at
        end_at = 0.0 if duration_s is None else start_at + duration_s
        for child in children:
            _tell(child, f"go {start_at!r} {end_at!r}")
        for child in children:
            line = _read_line(child, deadline_s=None, stop=stop, children=children)
            if line.startswith("{"):
                totals.append(json.loads(line))
    finally:
        for child in children:
            _tell(child, "stop")
        for child in children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
    ended_at = time.time()
    problems = [_death(child, config, ended_at - started_at) for child, config in zip(children, configs, strict=True)
                if child.returncode != 0]
    return totals, problems


def _death(child: subprocess.Popen[str], config: _Config, after_s: float) -> str:
    """A dead simulator process in words: which ranks, how it ended, when."""
    code = child.returncode
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return (f"simulator process {child.pid} (ranks {config.first_rank}..{config.last_rank - 1}) {how} about "
            f"{max(0.0, after_s):.1f} s into the run; the other ranks were stopped with it")


def _tell(child: subprocess.Popen[str], line: str) -> None:
    try:
        if child.stdin is not None and child.poll() is None:
            child.stdin.write(line + "\n")
            child.stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # the child is gone; its missing result says so


def _read_line(child: subprocess.Popen[str], *, deadline_s: float | None, stop: threading.Event,
               children: Sequence[subprocess.Popen[str]] = ()) -> str:
    """The child's next stdout line. While waiting, relays ``stop`` to all children, and stops them all as soon
    as one of ``children`` has died (exit code other than 0)."""
    assert child.stdout is not None
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(child.stdout.readline() if child.stdout else ""),
                              daemon=True)
    reader.start()
    started = time.monotonic()
    told = False
    while reader.is_alive():
        reader.join(0.1)
        died = any(other.poll() not in (None, 0) for other in children)
        if (stop.is_set() or died) and not told:
            for other in children or (child,):
                _tell(other, "stop")
            told = True
        if deadline_s is not None and time.monotonic() - started > deadline_s:
            return ""
    return box[0].strip() if box else ""


def _child_main(config_json: str) -> None:
    """Body of one simulator process: start its agents, wait for the common origin, replay the steps."""
    fields: dict[str, Any] = json.loads(config_json)
    if fields.get("straggler") is not None:
        fields["straggler"] = tuple(fields["straggler"])  # JSON has no tuples
    config = _Config(**fields)
    # Ctrl-C reaches the whole process group; the parent decides when to stop and tells us on stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    agents = _start_agents(config)
    print("ready", flush=True)
    words = sys.stdin.readline().split()
    if not words or words[0] != "go":
        _close_all([t for t, _ in agents])
        return
    start_at, end_at = float(words[1]), float(words[2])
    halt = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()  # "stop", or EOF when the parent went away
        halt.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    outcome = _drive(config, agents, start_at, end_at or None, halt)
    print(json.dumps(outcome), flush=True)


def _start_agents(config: _Config, keys: AgentKeys | None = None) -> list[tuple[Agent, list[int]]]:
    agents = []
    for first in range(config.first_rank, config.last_rank, config.ranks_per_agent):
        group = list(range(first, min(first + config.ranks_per_agent, config.last_rank)))
        devices = [{"index": r % RANKS_PER_HOST, "name": "Simulated GPU", "uuid": f"SIM-GPU-{r:05d}",
                    "simulated": True} for r in group]
        telemetry = start(framework="simulated", strategy="simulated", rank=first, local_rank=first % RANKS_PER_HOST,
                          world_size=config.ranks, ranks=group, node_rank=first // RANKS_PER_HOST, backend="simulated",
                          devices=devices, endpoint=config.endpoint, run_id=config.run_id, sample_devices=False,
                          heartbeat=False, keys=keys)
        # Simulated ranks live on simulated hosts; the identity object is what the publisher re-sends.
        telemetry.identity.host = _host_of(first)
        agents.append((telemetry, group))
    return agents


def _drive(config: _Config, agents: list[tuple[Agent, list[int]]], origin_s: float, end_wall: float | None,
           stop: Any) -> dict[str, Any]:
    rng = np.random.default_rng(_SEED)  # same seed everywhere: every process computes the same cluster step
    step_start = origin_s
    next_gpu = origin_s
    next_host = origin_s
    step = 0
    step_records = 0
    records_put = 0
    watch = _DeliveryWatch([t for t, _ in agents], config.give_up_after_s, origin_s)
    while not stop.is_set():
        if config.steps is not None and step >= config.steps:
            break
        phases = step_phases(config, rng)
        step_end = step_start + float(phases["step"][0])
        if end_wall is not None and step_end > end_wall:
            break
        if _sleep_until(step_end, stop, watch):
            break
        loss = 2.5 * math.exp(-step / 500.0) + 0.1
        for telemetry, group in agents:
            for rank in group:
                telemetry.step(rank, step, step_start, step_end, data_wait_s=float(phases["data_wait"][rank]),
                               compute_s=float(phases["compute"][rank]), comm_s=float(phases["comm"][rank]),
                               comm_exposed_s=float(phases["exposed"][rank]), samples=32, loss=loss,
                               bucket_count=4, bucket_bytes=25 * 1024 * 1024, first_batch=step == 0)
        step_records += sum(len(g) for _, g in agents)
        if step_end >= next_gpu:
            records_put += _gpu_samples(agents, phases, step_end)
            next_gpu = step_end + GPU_INTERVAL_S
        if step_end >= next_host:
            records_put += _host_samples(agents, step_end)
            next_host = step_end + HOST_INTERVAL_S
        if step and step % CHECKPOINT_EVERY_STEPS == 0 and config.first_rank == 0:
            agents[0][0].event(EventKind.CHECKPOINT_SAVED, rank=0, step=step, duration_s=0.8,
                               bytes=1_400_000_000, text="simulated checkpoint")
            records_put += 1
        step_start = step_end
        step += 1
    run_s = max(0.0, time.time() - origin_s) if step else 0.0
    _close_all([t for t, _ in agents])
    stats = [t.stats for t, _ in agents]
    return {
        "run_s": run_s,
        "agents": len(agents),
        "steps": step,
        "step_records": step_records,
        "records_put": records_put + step_records + 2 * len(agents),  # + started/finished events
        "sent_records": sum(s.sent_records for s in stats if s is not None),
        "dropped_records": sum(s.dropped_records for s in stats if s is not None),
        "gave_up": watch.gave_up,
    }


class _DeliveryWatch:
    """Decides once, ``give_up_after_s`` after the origin, whether any agent has delivered a message."""

    def __init__(self, agents: Sequence[Agent], give_up_after_s: float | None, origin_s: float) -> None:
        self._agents = agents
        self._deadline = None if give_up_after_s is None else origin_s + give_up_after_s
        self.gave_up = False

    def seconds_to_decision(self, now: float) -> float:
        """How long until the decision is due (infinite once it is made or when there is none to make)."""
        return math.inf if self._deadline is None else max(0.0, self._deadline - now)

    def give_up(self, now: float) -> bool:
        """True (once and for good) when the deadline passed and no agent has sent a single record."""
        if self._deadline is None or now < self._deadline:
            return self.gave_up
        self._deadline = None
        self.gave_up = not any(a.stats is not None and a.stats.sent_records > 0 for a in self._agents)
        return self.gave_up


def _sleep_until(wall_s: float, stop: Any, watch: _DeliveryWatch) -> bool:
    """Wait until ``time.time()`` reaches ``wall_s``; True when the simulation must end instead (``stop`` set,
    or nobody took a message in time)."""
    while True:
        now = time.time()
        if watch.give_up(now):
            return True
        remaining = wall_s - now
        if remaining <= 0:
            return False
        if stop.wait(min(remaining, watch.seconds_to_decision(now) + 0.001)):
            return True


def _close_all(agents: Sequence[Agent]) -> None:
    """Close agents in parallel (each waits, up to 5 s, for the collector to confirm what it sent); what the
    collector did not confirm is said once for the process, not once per agent."""
    closers = [threading.Thread(target=a.close, args=(5.0,), kwargs={"report": False}, daemon=True) for a in agents]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(10.0)
    unconfirmed = [stats.unconfirmed_at_close for a in agents if (stats := a.stats) is not None]
    if any(unconfirmed):
        log.warning("ringscope simulate: %d record(s) of %d agent(s) sent but never confirmed by the collector (it "
                    "may have written them: the recording says what it holds)", sum(unconfirmed),
                    sum(1 for n in unconfirmed if n))


def _gpu_samples(agents: list[tuple[Agent, list[int]]], phases: dict[str, np.ndarray], now: float) -> int:
    count = 0
    for telemetry, group in agents:
        for rank in group:
            busy = float(phases["compute"][rank] / phases["step"][rank])
            telemetry.put(GpuSample(ts_s=now, host=_host_of(rank), gpu_index=rank % RANKS_PER_HOST,
                                    uuid=f"SIM-GPU-{rank:05d}", name="Simulated GPU", rank=rank,
                                    util_pct=round(100.0 * busy, 1), mem_util_pct=round(60.0 * busy, 1),
                                    mem_used_bytes=60 * 2**30, mem_total_bytes=80 * 2**30,
                                    power_w=round(120 + 480 * busy, 1), energy_j=None, temp_c=55 + 20 * busy,
                                    sm_clock_mhz=1980.0, throttle_reasons=0))
            count += 1
    return count


def _host_samples(agents: list[tuple[Agent, list[int]]], now: float) -> int:
    for telemetry, group in agents:
        telemetry.put(HostSample(ts_s=now, host=_host_of(group[0]), cpu_pct=35.0, mem_used_bytes=400 * 2**30,
                                 mem_total_bytes=2048 * 2**30, process_cpu_pct=100.0, process_rss_bytes=12 * 2**30,
                                 gpu_count=len(group), gpu_status=GpuStatus.OK,
                                 gpu_status_detail="simulated GPUs (ringscope simulate)"))
    return len(agents)


def _host_of(rank: int) -> str:
    return f"sim-node-{rank // RANKS_PER_HOST:04d}"


def _validate(ranks: int, steps_per_second: float, duration_s: float | None, steps: int | None,
              straggler: tuple[int, float] | None, data_stall_ms: float, give_up_after_s: float | None) -> None:
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if not (0 < steps_per_second <= MAX_STEPS_PER_SECOND) or not math.isfinite(steps_per_second):
        raise ValueError(f"steps per second must be in (0, {MAX_STEPS_PER_SECOND:g}], got {steps_per_second}")
    if give_up_after_s is not None and not (give_up_after_s > 0 and math.isfinite(give_up_after_s)):
        raise ValueError(f"give_up_after_s must be a finite number > 0 (or None), got {give_up_after_s}")
    if duration_s is not None and duration_s <= 0:
        raise ValueError(f"duration must be > 0 s, got {duration_s}")
    if steps is not None and steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if straggler is not None and not (0 <= straggler[0] < ranks):
        raise ValueError(f"straggler rank {straggler[0]} does not exist: ranks are 0..{ranks - 1}")
    if straggler is not None and straggler[1] < 0:
        raise ValueError(f"straggler extra time must be >= 0 ms, got {straggler[1]}")
    if data_stall_ms < 0 or not math.isfinite(data_stall_ms):
        raise ValueError(f"data stall must be >= 0 ms, got {data_stall_ms}")


if __name__ == "__main__":
    _child_main(sys.argv[1])
