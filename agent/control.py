"""The reply path: control messages between the collector, its agents and the tools that ask it (stacks, settings).

Telemetry goes one way, agent -> collector, as one-frame messages (``ringscope.agent.wire``). Everything else on the
same connection is a **control message** of two frames, ``[CONTROL_MARKER, msgpack map]``, so the two can never be
mistaken for each other and both travel over the one socket an agent already has (same endpoint, same CURVE
security, same SSH tunnels and firewall rules)::

    collector -> agent   {"c": "ack", "q": seq}                     everything up to seq is committed: forget it
    collector -> agent   {"c": "stacks", "id": request}            send every thread's stack now
    collector -> agent   {"c": "set", "id": request, "settings": {name: value}}
    collector -> agent   {"c": "profile", "id": request, "steps": N}  profile the next N steps
    tool -> collector    {"c": "stacks" | "set" | "profile", "id": request, "run": run id or None,
                          "ranks": [...] or None, "settings": {...}, "steps": N, "wait_s": seconds}
    collector -> tool    {"c": "reply", "id": request, "ok": bool, "error": text, "result": {...}}
    tool -> collector    {"c": "status", "id": request, "run": run id}   the run's state as the collector judges it
    tool -> collector    {"c": "attempt", "id": request, "run": run id, "attempt": {...}}   a restart supervisor's
                          word on an attempt of the run (started / ended, reason, exit code): recorded

``status`` and ``attempt`` are answered by the collector itself (they reach no agent): they let ``ringscope run
--restart`` learn that its run hung or lost a rank, and put its attempts into the recording.

Agents answer a request with telemetry records (an ``Event`` of kind ``stacks`` or ``control`` whose text is the
JSON answer), so what they answer is recorded like everything else they send.

``decode`` judges a message before anything acts on it: size, shape, types, known commands and settings, value
ranges. It raises ``ControlError`` (with a stable ``reason``) and nothing else. Stdlib + msgpack only: no zmq,
frameworks or Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

CONTROL_MARKER: Final[bytes] = b"ringscope-control-1"
"""First frame of every control message (telemetry messages have one frame and never start with it)."""

MAX_CONTROL_BYTES: Final[int] = 64 * 1024
"""Largest control message accepted (a request or an ack is well under 1 KiB; replies to tools are not bounded by
this: they travel the other way)."""

MAX_REQUEST_ID_CHARS: Final[int] = 64
MAX_RUN_ID_CHARS: Final[int] = 256
MAX_WAIT_S: Final[float] = 600.0
MAX_PROFILE_STEPS: Final[int] = 1000

ACK: Final = "ack"
STACKS: Final = "stacks"
SET: Final = "set"
PROFILE: Final = "profile"
REPLY: Final = "reply"
STATUS: Final = "status"
ATTEMPT: Final = "attempt"
COMMANDS: Final[frozenset[str]] = frozenset({ACK, STACKS, SET, PROFILE, REPLY, STATUS, ATTEMPT})
REQUESTS: Final[frozenset[str]] = frozenset({STACKS, SET, PROFILE})
"""What a tool may ask a collector to forward to agents."""
COLLECTOR_REQUESTS: Final[frozenset[str]] = frozenset({STATUS, ATTEMPT})
"""What a tool may ask the collector itself."""

ATTEMPT_EVENTS: Final[tuple[str, ...]] = ("started", "ended", "scheduler")
"""``scheduler``: the batch scheduler's state of the attempt's job, as a Slurm launch's follower sees it change
(``reason``: queued, starting, running, suspended, finished, failed, cancelled or timeout; ``detail``: the sentence,
e.g. ``job 41 queued (Resources)``)."""
MAX_ATTEMPTS: Final[int] = 10_000
MAX_DETAIL_CHARS: Final[int] = 2000

SETTINGS: Final[dict[str, tuple[type, float, float] | tuple[str, ...]]] = {
    "stack_after_s": (float, 0.5, 3600.0),
    "device_interval_s": (float, 0.05, 60.0),
    "timing": ("light", "full"),
    "flush_interval_s": (float, 0.01, 1.0),
}
"""What ``set`` may change while a run goes on, and the values accepted (numbers: type, min, max; text: choices).

* ``stack_after_s``: how long a rank sits in one phase before its heartbeat carries its stack.
* ``device_interval_s``: the device (NVML / host) sampling period.
* ``timing``: DDP's gradient-communication timing, ``light`` (no comm hook) or ``full`` (per-bucket hook).
* ``flush_interval_s``: how long records wait on the agent before they are sent (a headless recorder asks for
  longer: fewer wake-ups of every rank's sender thread; a window keeps the agent's own, short, for latency).
"""

REASONS: Final[dict[str, str]] = {
    "control_oversized": f"a control message larger than {MAX_CONTROL_BYTES} bytes",
    "control_malformed": "not a control message of this format (bad msgpack, wrong frames or types, an unknown "
                         "command or setting, a value out of range)",
    "unknown_run": "a request for a run this collector has no live agents of",
}
"""Rejection codes the collector counts for control messages (beside ``ringscope.agent.wire.REASONS``)."""


class ControlError(ValueError):
    """A control message that cannot be accepted; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AttemptNote:
    """A restart supervisor's word on one attempt (one start) of a run: it ``started``, or it ``ended`` with a
    ``reason`` (``finished``, ``stopped``, ``hang``, ``failure``, ``lost``) and the command's exit code; or the batch
    scheduler's state of the attempt's job changed (``scheduler``, see ``ATTEMPT_EVENTS``)."""

    attempt: int
    event: str  # one of ATTEMPT_EVENTS
    ts_s: float  # Unix seconds, the supervisor's clock
    reason: str = ""
    exit_code: int | None = None
    detail: str = ""

    def to_body(self) -> dict[str, Any]:
        """The map ``encode(ATTEMPT, attempt=...)`` sends."""
        return {"n": self.attempt, "event": self.event, "ts_s": self.ts_s, "reason": self.reason,
                "exit_code": self.exit_code, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Control:
    """One decoded, validated control message."""

    command: str
    request_id: str = ""
    seq: int | None = None  # ack
    run_id: str | None = None  # tool requests
    ranks: tuple[int, ...] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    wait_s: float | None = None
    steps: int | None = None  # profile
    attempt: AttemptNote | None = None  # attempt
    ok: bool = True  # replies
    error: str = ""
    result: dict[str, Any] = field(default_factory=dict)


def encode(command: str, **body: Any) -> list[bytes]:
    """The frames of one control message (``body`` keys: ``id``, ``q``, ``run``, ``ranks``, ``settings``,
    ``wait_s``, ``ok``, ``error``, ``result``; None values are left out)."""
    payload = {"c": command, **{key: value for key, value in body.items() if value is not None}}
    return [CONTROL_MARKER, msgpack.packb(payload, use_bin_type=True)]


def is_control(frames: list[bytes]) -> bool:
    """Whether ``frames`` (without a routing identity) claim to be a control message."""
    return len(frames) == 2 and frames[0] == CONTROL_MARKER


def decode(frames: list[bytes], *, limit: int | None = MAX_CONTROL_BYTES) -> Control:
    """Validate and decode the frames of one control message. Raises ``ControlError`` only.

    ``limit`` bounds requests (None for replies a tool reads: results carry many ranks' stacks).
    """
    if len(frames) != 2 or frames[0] != CONTROL_MARKER:
        raise ControlError("control_malformed", f"expected 2 frames starting with {CONTROL_MARKER!r}, got "
                                                f"{len(frames)} frame(s)")
    data = frames[1]
    if limit is not None and len(data) > limit:
        raise ControlError("control_oversized", f"{len(data)} bytes; the limit is {limit}")
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True,
                               max_str_len=len(data), max_bin_len=0, max_ext_len=0)
    except Exception as exc:
        raise ControlError("control_malformed", f"not msgpack ({type(exc).__name__})") from None
    if not isinstance(body, dict) or not isinstance(body.get("c"), str):
        raise ControlError("control_malformed", "not a map with a command 'c'")
    command = body["c"]
    if command not in COMMANDS:
        raise ControlError("control_malformed", f"unknown command {command[:40]!r}")
    request_id = body.get("id", "")
    if not isinstance(request_id, str) or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise ControlError("control_malformed", "'id' must be text of at most "
                                                f"{MAX_REQUEST_ID_CHARS} characters")
    if command == ACK:
        seq = body.get("q")
        if type(seq) is not int or not 0 <= seq < 2**63:
            raise ControlError("control_malformed", "an ack needs a sequence number 'q' >= 0")
        return Control(ACK, seq=seq)
    if command == REPLY:
        result = body.get("result", {})
        if not isinstance(result, dict):
            raise ControlError("control_malformed", "'result' must be a map")
        return Control(REPLY, request_id, ok=bool(body.get("ok", False)), error=str(body.get("error", ""))[:2000],
                       result=result)
    run_id = body.get("run")
    if run_id is not None and (not isinstance(run_id, str) or len(run_id) > MAX_RUN_ID_CHARS):
        raise ControlError("control_malformed", f"'run' must be text of at most {MAX_RUN_ID_CHARS} characters")
    if command in COLLECTOR_REQUESTS and not run_id:
        raise ControlError("control_malformed", f"a {command} request needs the run id 'run'")
    attempt = check_attempt(body.get("attempt")) if command == ATTEMPT else None
    ranks = body.get("ranks")
    if ranks is not None:
        if not isinstance(ranks, list) or len(ranks) > 65_536 or \
                any(type(r) is not int or not 0 <= r < 2**31 for r in ranks):
            raise ControlError("control_malformed", "'ranks' must be a list of ranks (0 .. 2^31-1)")
        ranks = tuple(ranks)
    wait_s = body.get("wait_s")
    if wait_s is not None:
        if not isinstance(wait_s, int | float) or isinstance(wait_s, bool) or not 0 < wait_s <= MAX_WAIT_S:
            raise ControlError("control_malformed", f"'wait_s' must be a number of seconds in (0, {MAX_WAIT_S}]")
        wait_s = float(wait_s)
    settings = body.get("settings", {})
    if command == SET:
        settings = check_settings(settings)
    elif settings:
        raise ControlError("control_malformed", f"'settings' belong to a set request, not {command!r}")
    steps = body.get("steps")
    if command == PROFILE:
        if type(steps) is not int or not 1 <= steps <= MAX_PROFILE_STEPS:
            raise ControlError("control_malformed", f"a profile request needs 'steps' in 1..{MAX_PROFILE_STEPS}")
    elif steps is not None:
        raise ControlError("control_malformed", f"'steps' belong to a profile request, not {command!r}")
    return Control(command, request_id, run_id=run_id, ranks=ranks, settings=settings, wait_s=wait_s, steps=steps,
                   attempt=attempt)


def check_attempt(body: object) -> AttemptNote:
    """The ``attempt`` map of an attempt request, validated (raises ``ControlError``)."""
    if not isinstance(body, dict):
        raise ControlError("control_malformed", "an attempt request needs 'attempt', a map")
    number, event, ts_s = body.get("n"), body.get("event"), body.get("ts_s")
    if type(number) is not int or not 1 <= number <= MAX_ATTEMPTS:
        raise ControlError("control_malformed", f"'attempt.n' must be an attempt number in 1..{MAX_ATTEMPTS}")
    if event not in ATTEMPT_EVENTS:
        raise ControlError("control_malformed", f"'attempt.event' must be one of {', '.join(ATTEMPT_EVENTS)}")
    if not isinstance(ts_s, int | float) or isinstance(ts_s, bool) or not math.isfinite(ts_s):
        raise ControlError("control_malformed", "'attempt.ts_s' must be a time in Unix seconds")
    code = body.get("exit_code")
    if code is not None and (type(code) is not int or not -(2**31) <= code < 2**31):
        raise ControlError("control_malformed", "'attempt.exit_code' must be an integer exit code or null")
    reason, detail = body.get("reason", ""), body.get("detail", "")
    if not isinstance(reason, str) or len(reason) > 40 or not isinstance(detail, str):
        raise ControlError("control_malformed", "'attempt.reason' and 'attempt.detail' must be text")
    return AttemptNote(number, event, float(ts_s), reason, code, detail[:MAX_DETAIL_CHARS])


def check_settings(settings: object) -> dict[str, Any]:
    """The settings of a ``set`` request, validated against ``SETTINGS`` (raises ``ControlError``)."""
    if not isinstance(settings, dict) or not settings:
        raise ControlError("control_malformed", "a set request needs 'settings', a map of at least one of "
                                                f"{', '.join(sorted(SETTINGS))}")
    checked: dict[str, Any] = {}
    for name, value in settings.items():
        spec = SETTINGS.get(name) if isinstance(name, str) else None
        if spec is None:
            raise ControlError("control_malformed", f"unknown setting {str(name)[:40]!r}; known: "
                                                    f"{', '.join(sorted(SETTINGS))}")
        if spec and spec[0] is float:
            low, high = spec[1], spec[2]
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or \
                    not low <= value <= high:
                raise ControlError("control_malformed", f"{name} must be a number of seconds in [{low}, {high}]")
            checked[name] = float(value)
        else:
            if value not in spec:
                raise ControlError("control_malformed", f"{name} must be one of {', '.join(map(str, spec))}")
            checked[name] = value
    return checked
