"""The object a training process holds: identity, the background publisher and the device sampler in one place.

``agent.start(...)`` builds an ``Agent`` from arguments and the environment. The framework integrations
(``ringscope.agent.torch_ddp``, ``ringscope.agent.tf_distribute``) and ``ringscope.agent.simulate`` all report through
an ``Agent``; a user who times their own loop can call ``Agent.step`` directly.

Environment (a launcher sets these so the agents it starts reach its window):

* ``RINGSCOPE_ENDPOINT``  collector endpoint (default ``tcp://127.0.0.1:5757``)
* ``RINGSCOPE_RUN_ID``    run id shared by all processes of one training (default: ``TORCHELASTIC_RUN_ID`` or
  ``"run-<host>-<start time>"``)
* ``RINGSCOPE_DISABLE=1`` turn telemetry off (the API keeps working and does nothing)
* ``RINGSCOPE_KEY`` / ``RINGSCOPE_KEY_FILE`` access token (or a file holding it) of a collector that requires
  authentication (``ringscope.agent.keys``); a token that cannot be used turns telemetry off with an error in the log,
  never plaintext
* ``RINGSCOPE_DEVICE_INTERVAL_S`` device sampling period (default 0.5)
* ``RINGSCOPE_PRICE_PER_GPU_HOUR`` optional price, forwarded to the app for cost figures
* ``RINGSCOPE_ATTEMPT``   which start of the run this process belongs to (set by restart supervisors;
  ``current_attempt``), sent in the Hello
* ``RINGSCOPE_HOST`` the host name to report (default: the hostname); set per node where nodes share one hostname
* ``RINGSCOPE_SIGTERM_FLUSH=0`` leave SIGTERM alone. By default an agent started on the main thread of a process
  whose SIGTERM is untouched sends what it holds when SIGTERM comes (at most 1 s, even while the training thread is
  blocked in a collective), then the process ends as SIGTERM would have ended it (``ringscope.agent.termination``)

Every agent sends a heartbeat per rank about once a second from its own thread (``ringscope.agent.heartbeat``): where
the rank
is (data wait, compute, collective, checkpoint, idle) and, when it has been stuck in one phase for seconds, the Python
stack of the training thread, so the app can name a hung rank and show where it waits.

The reply path (``ringscope.agent.control``): a collector may ask for every thread's stack (answered with one
``Event`` of kind ``stacks`` per rank) or change a runtime setting (``stack_after_s``, ``device_interval_s``, and
``timing`` where the DDP integration registered it; answered with an ``Event`` of kind ``control`` saying what
was applied and what was refused, so the change is in the recording). Both are handled on the sender thread.

Training-thread cost: ``step`` / ``event`` build one small record and append it to a deque (a few µs).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ringscope.agent import control, termination
from ringscope.agent.devices import DeviceProbe, DeviceSampler, host_name
from ringscope.agent.heartbeat import INTERVAL_S as HEARTBEAT_INTERVAL_S
from ringscope.agent.heartbeat import HeartbeatThread, Position, dump_threads
from ringscope.agent.keys import AccessKeyError, AgentKeys, agent_keys_from_env
from ringscope.agent.publisher import DEFAULT_ENDPOINT, Publisher
from ringscope.agent.schema import (
    AGENT_VERSION,
    MAX_TEXT_CHARS,
    Event,
    EventKind,
    Hello,
    PublisherStats,
    Record,
    Step,
    schema_version_str,
)

log = logging.getLogger(__name__)

ENV_ENDPOINT = "RINGSCOPE_ENDPOINT"
ENV_RUN_ID = "RINGSCOPE_RUN_ID"
ENV_DISABLE = "RINGSCOPE_DISABLE"
ENV_DEVICE_INTERVAL = "RINGSCOPE_DEVICE_INTERVAL_S"
ENV_PRICE = "RINGSCOPE_PRICE_PER_GPU_HOUR"
ENV_ATTEMPT = "RINGSCOPE_ATTEMPT"


class Agent:
    """Reports one training process's telemetry. Create with ``agent.start``; all methods are non-blocking.

    Attributes:
        identity: the ``Hello`` record describing this process (rank(s), framework, devices...).
    """

    def __init__(self, identity: Hello, publisher: Publisher | None, sampler: DeviceSampler | None,
                 heartbeat_interval_s: float | None = HEARTBEAT_INTERVAL_S) -> None:
        self.identity = identity
        self._publisher = publisher
        self._sampler = sampler
        self._put = publisher.put if publisher is not None else _discard
        ranks = identity.ranks or [identity.rank]
        self._positions = {rank: Position(rank) for rank in ranks}
        self._heartbeat: HeartbeatThread | None = None
        if publisher is not None and heartbeat_interval_s:
            self._heartbeat = HeartbeatThread(list(self._positions.values()), publisher.put,
                                              interval_s=heartbeat_interval_s).start()
        # runtime settings a collector may change (``control.SETTINGS`` names), applied on the sender thread
        self._settings: dict[str, Callable[[Any], object]] = {}
        if self._heartbeat is not None:
            self._settings["stack_after_s"] = self._heartbeat.set_stack_after
        if sampler is not None:
            self._settings["device_interval_s"] = sampler.set_interval
        self._profiler: Callable[[str, int], object] | None = None
        if publisher is not None:
            self._settings["flush_interval_s"] = publisher.set_flush_interval
            publisher.on_control = self._on_control

    # ---- Public API ----------------------------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """False when telemetry is switched off (``RINGSCOPE_DISABLE=1``)."""
        return self._publisher is not None

    def step(
        self,
        rank: int,
        step: int,
        start_s: float,
        end_s: float,
        *,
        data_wait_s: float | None = None,
        compute_s: float | None = None,
        comm_s: float | None = None,
        comm_exposed_s: float | None = None,
        samples: int | None = None,
        loss: float | None = None,
        bucket_count: int | None = None,
        bucket_bytes: int | None = None,
        first_batch: bool = False,
        epoch: int | None = None,
    ) -> None:
        """Record one finished step of ``rank``. Times are ``time.time()`` seconds; phases in seconds or None."""
        self._put(
            Step(rank, step, start_s, end_s, end_s - start_s, data_wait_s, compute_s, comm_s, comm_exposed_s,
                 samples, loss, bucket_count, bucket_bytes, first_batch, epoch)
        )

    def event(
        self,
        event: str,
        *,
        rank: int | None = None,
        step: int | None = None,
        duration_s: float | None = None,
        bytes: int | None = None,  # noqa: A002 - the schema's field name
        text: str | None = None,
        epoch: int | None = None,
    ) -> None:
        """Record an event (see ``EventKind``): checkpoint saved/restored, restart, epoch, error, finished."""
        if text is not None and len(text) > MAX_TEXT_CHARS:
            text = text[: MAX_TEXT_CHARS - 20] + " ...[truncated]"
        self._put(Event(time.time(), event, rank, step, duration_s, bytes, text, epoch))

    def put(self, record: Record) -> None:
        """Queue any schema record (for integrations that build records themselves)."""
        self._put(record)

    def add_producer(self, produce: Callable[[], object]) -> bool:
        """Have ``produce()`` called on the sender thread every flush interval (it may ``put`` records); False when
        there is no sender (telemetry disabled): the caller then does its work itself."""
        if self._publisher is None:
            return False
        self._publisher.add_producer(produce)
        return True

    def remove_producer(self, produce: Callable[[], object]) -> None:
        """Undo ``add_producer``."""
        if self._publisher is not None:
            self._publisher.remove_producer(produce)

    def position(self, rank: int | None = None) -> Position:
        """Where ``rank`` (default: this process's first rank) is; the integrations call ``enter`` on it as the
        training moves between data wait, compute, the collective and checkpoints (a few attribute stores)."""
        return self._positions.get(self.identity.rank if rank is None else rank) or \
            next(iter(self._positions.values()))

    def request_stacks(self) -> None:
        """Send the stack of every rank of this process with the next heartbeat."""
        if self._heartbeat is not None:
            self._heartbeat.request_stacks()

    def add_setting(self, name: str, apply: Callable[[Any], object]) -> None:
        """Let a collector change ``name`` (one of ``control.SETTINGS``) while the run goes on: ``apply(value)`` is
        called on the sender thread with a validated value; it must be quick and may raise ``ValueError`` to
        refuse (the reason goes back to whoever asked)."""
        if name not in control.SETTINGS:
            raise ValueError(f"unknown setting {name!r}; known: {', '.join(sorted(control.SETTINGS))}")
        self._settings[name] = apply

    def set_profiler(self, request: Callable[[str, int], object]) -> None:
        """Let a collector ask for profiles: ``request(request_id, steps)`` is called on the sender thread; it must
        only arm the profiler (raise ``RuntimeError`` to refuse) and answer later with a ``profile`` event."""
        self._profiler = request

    def _on_control(self, message: control.Control) -> None:
        """A request from the collector (sender thread): answer with records, never touch the training thread."""
        now = time.time()
        if message.command == control.STACKS:
            dumps: dict[int | None, list[dict[str, Any]]] = {}  # ranks of one thread share its dump
            for rank, position in self._positions.items():
                thread = position.thread_id
                if thread not in dumps:
                    dumps[thread] = dump_threads(thread)
                answer = {"id": message.request_id, "pid": self.identity.pid, "host": self.identity.host,
                          "phase": position.phase, "since_s": position.since_s, "step": position.step,
                          "threads": dumps[thread]}
                self._put(Event(now, EventKind.STACKS, rank, position.step, text=json.dumps(answer)))
        elif message.command == control.PROFILE:
            try:
                if self._profiler is None:
                    raise RuntimeError("no profiler in this process: profiles on demand need the PyTorch DDP "
                                       "integration (ringscope run, or instrument())")
                self._profiler(message.request_id, message.steps or 1)
            except RuntimeError as exc:
                text = json.dumps({"id": message.request_id, "host": self.identity.host, "pid": self.identity.pid,
                                   "error": str(exc)})
                self._put(Event(now, EventKind.PROFILE, self.identity.rank, text=text))
        elif message.command == control.SET:
            applied: dict[str, Any] = {}
            refused: dict[str, str] = {}
            for name, value in message.settings.items():
                apply = self._settings.get(name)
                if apply is None:
                    refused[name] = "not adjustable in this process (no integration registered it)"
                    continue
                try:
                    apply(value)
                    applied[name] = value
                except (ValueError, RuntimeError) as exc:
                    refused[name] = str(exc)[:300]
            text = json.dumps({"id": message.request_id, "applied": applied, "refused": refused})
            self._put(Event(now, EventKind.CONTROL, self.identity.rank, text=text))

    @property
    def stats(self) -> PublisherStats | None:
        """Queue and drop counters, or None when disabled."""
        return None if self._publisher is None else self._publisher.stats

    def close(self, timeout_s: float = 2.0, *, finished: bool = True, report: bool = True) -> None:
        """Send a ``finished`` event (unless told not to), flush within ``timeout_s`` and stop the threads;
        ``report=False`` leaves saying what the collector did not confirm to the caller (``Publisher.close``)."""
        if self._publisher is None:
            return
        if self._heartbeat is not None:
            self._heartbeat.close()
        if finished:
            self.event(EventKind.FINISHED, rank=self.identity.rank)
        if self._sampler is not None:
            self._sampler.close()
        self._publisher.close(timeout_s, report=report)
        # only now: a SIGTERM during the close above (torchrun tearing the job down while a rank that saw its
        # peer die closes) must still wait for what is being handed over (``Publisher.close``), not end the
        # process at once because nothing is registered any more
        termination.unregister(self)

    def _terminated(self, timeout_s: float) -> None:
        """The process got SIGTERM (``termination``): say so, and hand over what is held within ``timeout_s``."""
        if self._publisher is None:
            return
        self.event(EventKind.WARNING, rank=self.identity.rank,
                   text="SIGTERM: this process is being stopped; the agent sent what it held")
        # sent and lingered: no time spent on acknowledgements, nor a warning about them from a dying process
        self._publisher.close(timeout_s, report=False, confirm=False)

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.event(EventKind.ERROR, rank=self.identity.rank, text=f"{exc_type.__name__}: {exc}")
        self.close()


def start(
    *,
    framework: str,
    strategy: str,
    rank: int = 0,
    local_rank: int = 0,
    world_size: int = 1,
    ranks: Sequence[int] | None = None,
    node_rank: int | None = None,
    backend: str | None = None,
    devices: Sequence[dict[str, Any]] = (),
    endpoint: str | None = None,
    run_id: str | None = None,
    keys: AgentKeys | None = None,
    sample_devices: bool = True,
    heartbeat: bool = True,
    gpu_indices: Sequence[int] | None = None,
    rank_of_gpu: dict[int, int] | None = None,
    device_interval_s: float | None = None,
    queue_capacity: int = 65_536,
    flush_interval_s: float = 0.05,
) -> Agent:
    """Build and start an ``Agent``. Arguments override the environment (see module docstring).

    ``ranks`` defaults to ``[rank]``; a process driving several replicas (MirroredStrategy) lists them all.
    ``heartbeat=False`` sends no heartbeats (simulated clusters of a thousand agents in one process).
    ``gpu_indices`` are NVML indices to sample (map CUDA devices by UUID/PCI id, not index, under
    ``CUDA_VISIBLE_DEVICES``); ``rank_of_gpu`` tags each GPU's samples with the rank using it.
    """
    endpoint = endpoint or os.environ.get(ENV_ENDPOINT) or DEFAULT_ENDPOINT
    elastic_run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic_run_id == "none":  # plain `torchrun` without --rdzv-id sets the literal "none"
        elastic_run_id = None
    run_id = run_id or os.environ.get(ENV_RUN_ID) or elastic_run_id or _default_run_id()
    host = host_name()
    pid = os.getpid()
    agent_id = f"{host}:{pid}:{uuid.uuid4().hex[:8]}"
    identity = Hello(
        run_id=run_id,
        agent_id=agent_id,
        host=host,
        pid=pid,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        node_rank=node_rank,
        ranks=list(ranks) if ranks is not None else [rank],
        framework=framework,
        strategy=strategy,
        backend=backend,
        devices=[dict(d) for d in devices],
        agent_version=AGENT_VERSION,
        schema_version=schema_version_str(),
        clock_wall_s=time.time(),
        clock_mono_s=time.monotonic(),
        started_s=time.time(),
        price_per_gpu_hour=_env_float(ENV_PRICE),
        attempt=current_attempt(),
        job_id=os.environ.get("SLURM_JOB_ID", "").strip() or None,
    )
    if os.environ.get(ENV_DISABLE, "").strip() in {"1", "true", "yes"}:
        return Agent(identity, None, None)
    if keys is None:
        try:
            keys = agent_keys_from_env()
        except AccessKeyError as exc:  # the training goes on; the user sees why the window gets nothing
            log.error("ringscope: %s; telemetry is off for this process", exc)
            return Agent(identity, None, None)

    def hello() -> Hello:
        identity.clock_wall_s, identity.clock_mono_s = time.time(), time.monotonic()
        return identity

    publisher = Publisher(
        endpoint, agent_id, hello=hello, queue_capacity=queue_capacity, flush_interval_s=flush_interval_s, keys=keys
    ).start()
    sampler = None
    if sample_devices:
        interval = device_interval_s or _env_float(ENV_DEVICE_INTERVAL) or 0.5
        probe = DeviceProbe(gpu_indices, rank_of_gpu)
        sampler = DeviceSampler(probe, publisher.put, interval).start()
    agent = Agent(identity, publisher, sampler, HEARTBEAT_INTERVAL_S if heartbeat else None)
    termination.register(agent, agent._terminated)  # torchrun's teardown must not lose the last steps
    agent.event(EventKind.STARTED, rank=rank)
    return agent


def _default_run_id() -> str:
    return f"run-{host_name()}-{time.strftime('%Y%m%d-%H%M%S')}"


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        log.warning("ringscope: ignoring %s=%r (not a number)", name, raw)
        return None


def _discard(record: Record) -> bool:
    return False


def current_attempt() -> int | None:
    """Which start of its run this process belongs to: ``RINGSCOPE_ATTEMPT`` (set by ``ringscope run --restart`` and
    the window's restart policy), else torchrun's own restart count + 1 (``torchrun --max-restarts``), else None."""
    for name, plus in ((ENV_ATTEMPT, 0), ("TORCHELASTIC_RESTART_COUNT", 1)):
        try:
            value = int(os.environ.get(name, ""))
        except ValueError:
            continue
        if value + plus >= 1:
            return value + plus
    return None
