"""THE Ringscope telemetry schema: every record kind, its fields, their units, and the version rule.

This module owns the vocabulary both sides speak. The wire format (``ringscope.agent.wire``), the collector's live
store, the SQLite recorder's tables and the views all derive from the ``FIELDS`` tables below; nothing else defines a
field. It must stay cheap to import: stdlib only, never torch, tensorflow, zmq or Qt.

Versioning (``SCHEMA_VERSION = (major, minor)``):

* **Minor** changes are compatible: a new *optional* field appended at the *end* of a record kind, or a new record
  kind. A receiver fills fields missing from an older sender with ``None`` and ignores trailing fields it does not
  know from a newer sender; an unknown record kind is counted and skipped.
* **Major** changes are everything else: renaming, removing, reordering or retyping a field. A receiver rejects a
  message whose major version differs from its own, with a message that names both versions.

Conventions: units are in field names (``_s`` seconds, ``_bytes``, ``_pct`` 0..100, ``_w`` watts, ``_c`` Celsius,
``_mhz``, ``_j`` joules). Timestamps ending in ``_s`` that are points in time (``ts_s``, ``start_s``, ``end_s``) are
Unix wall-clock seconds (``time.time()``) so that hosts can be put on one time axis. A missing reading is ``None``,
never 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

SCHEMA_VERSION: Final[tuple[int, int]] = (1, 4)
"""(major, minor). See the module docstring for what each part may change. 1.1: ``Health.disconnects``; 1.2: the
``Heartbeat`` record; 1.3: ``Hello.attempt``; 1.4: ``Hello.job_id``."""

AGENT_VERSION: Final[str] = "0.1.0"

MAX_TEXT_CHARS: Final[int] = 16_384
"""Longest string accepted in any text field (error texts are truncated to this by the agent)."""

# ---- Value limits (what a receiver accepts; ``ringscope.agent.wire`` enforces them)
# -----------------------------------------
# Every value must fit where it is kept: SQLite stores signed 64-bit integers, the reports put time points on one
# axis. A message holding a value outside these limits is rejected whole (reason "range" / "limit").

INT_MIN: Final[int] = -(2**63)
INT_MAX: Final[int] = 2**63 - 1
"""Integer fields (and sequence numbers) are signed 64-bit: what an SQLite INTEGER column holds."""

MAX_RANK: Final[int] = 2**31 - 1
"""Ranks, local ranks, node ranks, world sizes and GPU indices lie in ``0..MAX_RANK`` (c10d ranks are int32)."""

RANK_FIELDS: Final[frozenset[str]] = frozenset({"rank", "local_rank", "node_rank", "world_size", "gpu_index"})

WALL_CLOCK_FIELDS: Final[tuple[str, ...]] = ("start_s", "end_s", "ts_s", "since_s", "clock_wall_s", "started_s")
"""The fields that are points in wall-clock time (on the sending host's clock), not durations."""


def shifted(record: Any, offset_s: float) -> Any:
    """A copy of ``record`` with every wall-clock field moved by ``offset_s`` (the record itself when it has none):
    putting a host's timestamps on another clock.

    The live store shifts every record of an agent whose clock is off (tens of thousands a second at 8 192 ranks),
    so each record class gets its own copier, generated once, that assigns its slots directly: ~0.8 µs a record,
    where ``dataclasses.replace`` (which runs ``__init__``) took ~4 µs."""
    shift = _SHIFTERS.get(type(record))
    if shift is None:
        shift = _SHIFTERS[type(record)] = _shifter(type(record))
    return shift(record, offset_s)


def _shifter(cls: type) -> Callable[[Any, float], Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    wall = [name for name in names if name in WALL_CLOCK_FIELDS]
    lines = ["def shift(r, o):",
             f"    if not ({' or '.join(f'r.{n}.__class__ is float' for n in wall) or 'False'}):",
             "        return r",
             "    n = new(cls)"]
    lines += [f"    n.{name} = r.{name}" for name in names if name not in wall]
    lines += [f"    v = r.{name}\n    n.{name} = v + o if v.__class__ is float else v" for name in wall]
    lines.append("    return n")
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec("\n".join(lines), scope)  # code built from the dataclass's own field names only
    return scope["shift"]  # type: ignore[no-any-return]


_SHIFTERS: dict[type, Callable[[Any, float], Any]] = {}


MAX_ABS_SECONDS: Final[float] = 1e10
"""Fields in seconds (``*_s``: time points and durations) must be finite and within +-1e10 s (year 2286). A
non-finite *optional reading* that is not a time (``loss``, ``util_pct``, ``power_w``...) is kept as ``None``
("no reading"): a NaN loss from a diverging training is a missing value, not a reason to lose the step's timing."""

MAX_HELLO_RANKS: Final[int] = 4096
"""``Hello.ranks`` lists at most this many ranks (a flat list of ints); one process drives a few replicas."""

MAX_HELLO_DEVICES: Final[int] = 256
"""``Hello.devices`` holds at most this many maps, each a flat map of at most ``MAX_DEVICE_KEYS`` string keys
(``MAX_KEY_CHARS`` each) to ``None`` / bool / int / float / str values."""

MAX_DEVICE_KEYS: Final[int] = 64
MAX_KEY_CHARS: Final[int] = 256


# ---- Enumerations (kept as plain strings on the wire) ------------------------------------------------------------

FRAMEWORKS: Final[frozenset[str]] = frozenset({"pytorch", "tensorflow", "simulated", "other"})
STRATEGIES: Final[frozenset[str]] = frozenset(
    {"ddp", "mirrored", "multi_worker_mirrored", "simulated", "single", "other"}
)


class EventKind:
    """Values of ``Event.event``. Receivers accept unknown values (a newer agent may send more)."""

    STARTED: Final = "started"
    CHECKPOINT_SAVED: Final = "checkpoint_saved"
    CHECKPOINT_RESTORED: Final = "checkpoint_restored"
    RESTART: Final = "restart"
    EPOCH: Final = "epoch"
    ERROR: Final = "error"
    WARNING: Final = "warning"
    FINISHED: Final = "finished"
    HANG: Final = "hang"  # written by the collector side (not an agent): a run stopped completing steps
    STACKS: Final = "stacks"  # a stack dump on demand: text is the JSON answer (ringscope.agent.runtime)
    CONTROL: Final = "control"  # a runtime setting changed on demand: text says what was applied / refused
    PROFILE: Final = "profile"  # a profile on demand was taken: text is the JSON answer (trace path, top ops)

    ALL: Final[frozenset[str]] = frozenset(
        {STARTED, CHECKPOINT_SAVED, CHECKPOINT_RESTORED, RESTART, EPOCH, ERROR, WARNING, FINISHED, HANG, STACKS,
         CONTROL, PROFILE}
    )


class GpuStatus:
    """Values of ``HostSample.gpu_status``: an explicit statement of whether GPU readings exist."""

    OK: Final = "ok"
    NO_GPU: Final = "no_gpu"  # NVML library or driver absent, or zero devices
    NVML_ERROR: Final = "nvml_error"  # NVML present but failing (permissions, driver mismatch)


# ---- Field descriptions ------------------------------------------------------------------------------------------

# A field's wire type: the Python types a decoded value may have. ``None`` is allowed for every optional field.
_INT: Final = (int,)
_FLOAT: Final = (float, int)
_STR: Final = (str,)
_BOOL: Final = (bool,)
_LIST: Final = (list, tuple)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a record kind: its name (with unit), accepted wire types, whether it may be ``None``."""

    name: str
    types: tuple[type, ...]
    optional: bool
    doc: str

    @property
    def sql_type(self) -> str:
        """The SQLite column affinity for this field (lists are stored as JSON text)."""
        if self.types is _FLOAT:
            return "REAL"
        if self.types is _INT or self.types is _BOOL:
            return "INTEGER"
        return "TEXT"


def _f(name: str, types: tuple[type, ...], doc: str, *, optional: bool = True) -> FieldSpec:
    return FieldSpec(name, types, optional, doc)


# ---- Record kinds ------------------------------------------------------------------------------------------------
# Each record is a slotted dataclass whose field order IS the wire order. Append new optional fields at the end only.


@dataclass(slots=True)
class Hello:
    """Identity of one agent (one training process). Sent first and re-sent periodically.

    ``ranks`` lists the global ranks (replicas) this agent reports for: one for a DDP rank, several for a
    MirroredStrategy process (one per replica/device), ``num_local_replicas`` for each MultiWorker worker.
    """

    KIND: ClassVar[str] = "hello"
    run_id: str
    agent_id: str
    host: str
    pid: int
    rank: int
    local_rank: int
    world_size: int
    node_rank: int | None
    ranks: list[int]
    framework: str
    strategy: str
    backend: str | None
    devices: list[dict[str, Any]]
    agent_version: str
    schema_version: str
    clock_wall_s: float
    clock_mono_s: float
    started_s: float
    price_per_gpu_hour: float | None = None
    attempt: int | None = None  # 1, 2, ...: which start of the run this process belongs to (restarts); None: unknown
    job_id: str | None = None  # the batch scheduler's job id (SLURM_JOB_ID) when the process runs in a job


@dataclass(slots=True)
class Step:
    """One training step of one rank (replica). ``step_s`` = ``end_s - start_s``.

    Phases (see shared MEASURING.md): ``data_wait_s`` blocked waiting for the batch; ``compute_s`` forward +
    backward + optimizer; ``comm_s`` wall time of gradient all-reduce(s); ``comm_exposed_s`` the part of comm the
    rank actually waited for (the AllReduce stall). other = step_s - data_wait_s - compute_s - comm_exposed_s.
    ``first_batch`` marks a step whose data wait includes iterator/worker start-up (keep out of steady averages).
    """

    KIND: ClassVar[str] = "step"
    rank: int
    step: int
    start_s: float
    end_s: float
    step_s: float
    data_wait_s: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    comm_exposed_s: float | None = None
    samples: int | None = None
    loss: float | None = None
    bucket_count: int | None = None
    bucket_bytes: int | None = None
    first_batch: bool = False
    epoch: int | None = None


@dataclass(slots=True)
class GpuSample:
    """One NVML reading of one GPU. Every reading the board does not support is ``None``."""

    KIND: ClassVar[str] = "gpu"
    ts_s: float
    host: str
    gpu_index: int
    uuid: str | None = None
    name: str | None = None
    rank: int | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: int | None = None


@dataclass(slots=True)
class HostSample:
    """One reading of the host: CPU, memory, this process, and an explicit GPU presence statement."""

    KIND: ClassVar[str] = "host"
    ts_s: float
    host: str
    cpu_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    process_cpu_pct: float | None = None
    process_rss_bytes: int | None = None
    gpu_count: int = 0
    gpu_status: str = GpuStatus.NO_GPU
    gpu_status_detail: str | None = None


@dataclass(slots=True)
class Event:
    """Something that happened once: checkpoint saved/restored, restart, epoch, error, finished."""

    KIND: ClassVar[str] = "event"
    ts_s: float
    event: str
    rank: int | None = None
    step: int | None = None
    duration_s: float | None = None
    bytes: int | None = None
    text: str | None = None
    epoch: int | None = None


@dataclass(slots=True)
class Health:
    """The agent's own health: its queue and what it had to drop. Counters are cumulative since start.

    ``disconnects`` (schema 1.1; ``None`` from older agents) counts established connections to the collector that
    dropped. Messages not yet acknowledged at a drop are sent again at the reconnect; for what is still lost the
    collector accounts from sequence numbers: a gap, or at a newly started collector a "joined late"
    range; this counter says why such a range exists.
    """

    KIND: ClassVar[str] = "health"
    ts_s: float
    queue_len: int
    queue_capacity: int
    dropped_records: int
    sent_records: int
    sent_batches: int
    failed_batches: int  # sends ZeroMQ refused after its poll said yes (kept unacknowledged, sent again first)
    last_seq: int
    disconnects: int | None = None  # 1.1: times the connection to the collector dropped (cumulative)


@dataclass(slots=True)
class Heartbeat:
    """Where one rank is now (schema 1.2), sent about once a second from the agent's own thread.

    ``phase``: "data_wait" | "compute" | "collective" | "checkpoint" | "idle" (between steps); receivers accept
    others. ``since_s``: when the rank entered it. ``step``: the step in progress; ``bucket``: the gradient bucket
    in flight while in the collective. ``stack``: the Python stack of the training thread, sent only when the rank
    has been in one phase for several seconds (a hang) or on request.
    """

    KIND: ClassVar[str] = "heartbeat"
    ts_s: float
    rank: int
    phase: str
    since_s: float
    step: int | None = None
    bucket: int | None = None
    stack: str | None = None


Record = Hello | Step | GpuSample | HostSample | Event | Health | Heartbeat

@dataclass(slots=True)
class PublisherStats(Health):
    """Cumulative counters of one publisher (``Publisher.stats``): its ``Health`` record (the same fields, which go on
    the wire; ``ts_s``: when the snapshot was taken) and those that stay in the process. Not a record kind."""

    unacked: int = 0  # messages sent and not yet acknowledged
    unacked_bytes: int = 0
    acked_seq: int = -1  # highest sequence number the collector acknowledged
    resent_batches: int = 0  # messages sent again after a reconnect
    unacked_expired: int = 0  # messages forgotten unacknowledged (bounds reached)
    control_received: int = 0
    control_refused: int = 0  # malformed or failed control messages
    # records sent that the collector never acknowledged: still waiting when close() ended, or forgotten
    # unacknowledged (bounds) before; sent, maybe written (the recording says), but never confirmed
    unconfirmed_at_close: int = 0


RECORD_TYPES: Final[tuple[type, ...]] = (Hello, Step, GpuSample, HostSample, Event, Health, Heartbeat)
KIND_SINCE: Final[dict[str, tuple[int, int]]] = {"heartbeat": (1, 2)}
"""Record kinds added by a minor version: files and senders of an older minor version have none of them."""

KINDS: Final[dict[str, type]] = {cls.KIND: cls for cls in RECORD_TYPES}  # type: ignore[attr-defined]

_DOCS: Final[dict[str, str]] = {
    "data_wait_s": "Seconds the training loop was blocked waiting for this step's batch (incl. sync H2D copy).",
    "compute_s": "Seconds of forward + backward + optimizer work on this rank.",
    "comm_s": "Wall-clock seconds of the gradient all-reduce(s), overlapped or not.",
    "comm_exposed_s": "AllReduce stall: seconds this rank waited for communication not hidden behind compute "
    "(includes waiting for the slowest rank).",
    "step_s": "Wall-clock seconds of the whole step.",
    "util_pct": "NVML utilization: share of time some kernel ran on the GPU over the last 1/6-1 s. "
    "Not SM occupancy.",
}


def _types_for(annotation: str) -> tuple[tuple[type, ...], bool]:
    optional = "None" in annotation
    base = annotation.replace("| None", "").strip()
    if base.startswith("list"):
        return _LIST, optional
    table: dict[str, tuple[type, ...]] = {"int": _INT, "float": _FLOAT, "str": _STR, "bool": _BOOL}
    return table[base], optional


def _field_specs(cls: type) -> tuple[FieldSpec, ...]:
    specs = []
    for f in dataclasses.fields(cls):
        types, optional = _types_for(str(f.type))
        specs.append(FieldSpec(f.name, types, optional, _DOCS.get(f.name, "")))
    return tuple(specs)


FIELDS: Final[dict[str, tuple[FieldSpec, ...]]] = {kind: _field_specs(cls) for kind, cls in KINDS.items()}
"""Per record kind, its fields in wire order. The one table everything else derives from."""

FIELD_NAMES: Final[dict[str, tuple[str, ...]]] = {
    kind: tuple(spec.name for spec in specs) for kind, specs in FIELDS.items()
}

REQUIRED_COUNT: Final[dict[str, int]] = {
    kind: sum(1 for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING)
    for kind, cls in KINDS.items()
}
"""How many leading fields a sender of this major version always sends (those without defaults)."""


def schema_version_str() -> str:
    """The version as ``"major.minor"``."""
    return f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}"


def field_doc(name: str) -> str:
    """A one-line human description of a metric field, for tooltips and reports ('' if none)."""
    return _DOCS.get(name, "")


__all__ = [
    "AGENT_VERSION",
    "FIELDS",
    "FIELD_NAMES",
    "FRAMEWORKS",
    "INT_MAX",
    "INT_MIN",
    "KINDS",
    "KIND_SINCE",
    "MAX_ABS_SECONDS",
    "MAX_DEVICE_KEYS",
    "MAX_HELLO_DEVICES",
    "MAX_HELLO_RANKS",
    "MAX_KEY_CHARS",
    "MAX_RANK",
    "MAX_TEXT_CHARS",
    "RANK_FIELDS",
    "RECORD_TYPES",
    "REQUIRED_COUNT",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "Event",
    "EventKind",
    "FieldSpec",
    "GpuSample",
    "GpuStatus",
    "Health",
    "Heartbeat",
    "Hello",
    "HostSample",
    "Record",
    "Step",
    "field_doc",
    "schema_version_str",
]
