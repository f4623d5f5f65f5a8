"""Bytes <-> schema records: the one wire format, and the validation every received message goes through.

A message is one msgpack map (the *envelope*)::

    {"v": [major, minor], "a": agent_id, "q": seq, "t": sent_s, "r": [[kind, [field values...]], ...]}

``seq`` counts messages per agent from 0 so a receiver sees gaps instead of guessing them. Field values are
positional, in ``agent.schema.FIELDS`` order (see the version rule there). This module owns no sockets and never
raises anything but ``WireError`` from ``decode``; it must stay importable without zmq, torch, tensorflow or Qt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

import msgpack

from agent.schema import (
    FIELDS,
    KINDS,
    MAX_TEXT_CHARS,
    REQUIRED_COUNT,
    SCHEMA_VERSION,
    Record,
)

MAX_MESSAGE_BYTES: Final[int] = 4 * 1024 * 1024
"""Largest message a receiver accepts; larger ones are rejected (and counted) without being decoded."""

_GETTERS: Final = {kind: attrgetter(*(f.name for f in specs)) for kind, specs in FIELDS.items()}
_FIELD_COUNT: Final = {kind: len(specs) for kind, specs in FIELDS.items()}


class WireError(ValueError):
    """A received message that cannot be accepted. ``reason`` is a short stable code for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class Batch:
    """One decoded, validated message: who sent it, its sequence number, and its records.

    ``skipped`` counts records of unknown kinds (from a newer minor version) that were left out.
    """

    agent_id: str
    seq: int
    sent_s: float
    version: tuple[int, int]
    records: list[Record]
    skipped: int = 0


# ---- Public API --------------------------------------------------------------------------------------------------


def encode(agent_id: str, seq: int, sent_s: float, records: Iterable[Record]) -> bytes:
    """Pack records into one message. Runs on the agent's sender thread, never the training thread."""
    body = [[rec.KIND, list(_GETTERS[rec.KIND](rec))] for rec in records]
    envelope = {"v": list(SCHEMA_VERSION), "a": agent_id, "q": seq, "t": sent_s, "r": body}
    return msgpack.packb(envelope, use_bin_type=True)


def decode(data: bytes | memoryview) -> Batch:
    """Unpack and validate one message. Raises ``WireError`` (never anything else) when it is not acceptable."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError("oversized", f"{len(data)} bytes > limit {MAX_MESSAGE_BYTES}")
    try:
        envelope = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage input
        raise WireError("malformed", f"not a msgpack message ({type(exc).__name__}: {exc})") from None
    if not isinstance(envelope, dict):
        raise WireError("malformed", f"envelope is a {type(envelope).__name__}, expected a map")
    version = _check_version(envelope.get("v"))
    agent_id = envelope.get("a")
    seq = envelope.get("q")
    sent_s = envelope.get("t")
    body = envelope.get("r")
    if not isinstance(agent_id, str) or not agent_id or len(agent_id) > 256:
        raise WireError("malformed", f"agent id must be a non-empty string, got {agent_id!r:.80}")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise WireError("malformed", f"sequence number must be a non-negative integer, got {seq!r:.80}")
    if not isinstance(sent_s, (int, float)) or isinstance(sent_s, bool):
        raise WireError("malformed", f"send time must be a number, got {sent_s!r:.80}")
    if not isinstance(body, list):
        raise WireError("malformed", f"records must be a list, got {type(body).__name__}")
    records: list[Record] = []
    skipped = 0
    for index, item in enumerate(body):
        record = _decode_record(index, item)
        if record is None:
            skipped += 1
        else:
            records.append(record)
    return Batch(agent_id, seq, float(sent_s), version, records, skipped)


def record_values(record: Record) -> tuple[Any, ...]:
    """A record's field values in schema order (for recorders and tables)."""
    values = _GETTERS[record.KIND](record)
    return values if isinstance(values, tuple) else (values,)


# ---- Validation --------------------------------------------------------------------------------------------------


def _check_version(raw: Any) -> tuple[int, int]:
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or not all(isinstance(part, int) and not isinstance(part, bool) for part in raw)
    ):
        raise WireError("malformed", f"schema version must be [major, minor], got {raw!r:.80}")
    major, minor = raw
    if major != SCHEMA_VERSION[0]:
        raise WireError(
            "version",
            f"message uses schema {major}.{minor} but this collector speaks {SCHEMA_VERSION[0]}.x; "
            "run the same major Ringscope version in the agents and the app",
        )
    return major, minor


def _decode_record(index: int, item: Any) -> Record | None:
    if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
        raise WireError("malformed", f"record {index} must be [kind, [values]], got {item!r:.80}")
    kind, values = item
    cls = KINDS.get(kind)
    if cls is None:
        return None  # a newer minor version's record kind: skip, counted by the caller
    if not isinstance(values, list):
        raise WireError("malformed", f"record {index} ({kind}) values must be a list")
    specs = FIELDS[kind]
    count = _FIELD_COUNT[kind]
    if len(values) < REQUIRED_COUNT[kind]:
        raise WireError(
            "malformed", f"record {index} ({kind}) has {len(values)} values, needs at least {REQUIRED_COUNT[kind]}"
        )
    if len(values) > count:
        values = values[:count]  # trailing fields from a newer minor version
    for spec, value in zip(specs, values, strict=False):
        if value is None:
            if not spec.optional:
                raise WireError("type", f"record {index} ({kind}) field {spec.name} must not be null")
            continue
        if not isinstance(value, spec.types) or (isinstance(value, bool) and bool not in spec.types):
            raise WireError(
                "type",
                f"record {index} ({kind}) field {spec.name} must be "
                f"{'/'.join(t.__name__ for t in spec.types)}, got {type(value).__name__} {value!r:.40}",
            )
        if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
            raise WireError("type", f"record {index} ({kind}) field {spec.name} longer than {MAX_TEXT_CHARS}")
    return cls(*values)  # type: ignore[no-any-return]


def encode_raw(envelope: dict[str, Any]) -> bytes:
    """Pack an arbitrary envelope (for tests and tools that need to send deliberately wrong messages)."""
    return msgpack.packb(envelope, use_bin_type=True)


def values_of(records: Sequence[Record]) -> list[tuple[Any, ...]]:
    """Field-value tuples of many records of one kind (for batched SQL inserts)."""
    return [record_values(r) for r in records]
