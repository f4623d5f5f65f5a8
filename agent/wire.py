"""Bytes <-> schema records: the one wire format, and the validation every received message goes through.

A message is one msgpack map (the *envelope*)::

    {"v": [major, minor], "a": agent_id, "q": seq, "t": sent_s, "r": [[kind, [field values...]], ...]}

``seq`` counts messages per agent from 0 so a receiver sees gaps instead of guessing them. Field values are
positional, in ``ringscope.agent.schema.FIELDS`` order (see the version rule there).

Validation judges values, not only types, so that whatever is accepted can be stored and shown: integers fit in
signed 64 bits (ranks in ``0..MAX_RANK``), seconds are finite and within ``MAX_ABS_SECONDS``, text is ``str`` (never
bytes) of bounded length, ``Hello.ranks`` is a flat list of ints and ``Hello.devices`` a list of flat maps with
``str`` keys and scalar values, and nothing is nested or longer than the limits in ``ringscope.agent.schema``. A
non-finite
optional reading that is not a time (a NaN ``loss``) becomes ``None``. See ``REASONS`` for the rejection codes.

This module owns no sockets and never raises anything but ``WireError`` from ``decode`` (its own error texts are
built without recursion, so deeply nested input cannot break them); it must stay importable without zmq, torch,
tensorflow or Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

import msgpack

from ringscope.agent.schema import (
    FIELDS,
    INT_MAX,
    INT_MIN,
    KINDS,
    MAX_ABS_SECONDS,
    MAX_DEVICE_KEYS,
    MAX_HELLO_DEVICES,
    MAX_HELLO_RANKS,
    MAX_KEY_CHARS,
    MAX_RANK,
    MAX_TEXT_CHARS,
    RANK_FIELDS,
    REQUIRED_COUNT,
    SCHEMA_VERSION,
    FieldSpec,
    Hello,
    Record,
)

MAX_MESSAGE_BYTES: Final[int] = 4 * 1024 * 1024
"""Largest message a receiver accepts; larger ones are rejected (and counted) without being decoded."""

MAX_RECORDS_PER_MESSAGE: Final[int] = 8192
"""Most records in one message (the publisher sends at most ``batch_max``, 512 by default)."""

REASONS: Final[dict[str, str]] = {
    "oversized": f"the message is larger than {MAX_MESSAGE_BYTES} bytes",
    "malformed": "not a msgpack envelope of this format (garbage, truncated, nested too deep, msgpack extension "
                 "types, a sequence number or send time out of range, or not a Ringscope agent)",
    "version": "another major schema version",
    "type": "a field holds the wrong type (e.g. bytes where text is expected, a nested list where an int is)",
    "range": "a value outside what can be stored: an integer beyond 64 bits, a rank outside 0..2^31-1, a time "
             "that is not finite or beyond 1e10 s",
    "limit": "too many records, ranks, devices or characters in an otherwise well-formed message",
}
"""The stable short codes of ``WireError.reason`` (the collector adds its own for caps and unknown kinds)."""

# An upper estimate of what a decoded message holds in memory beyond its own bytes, measured with tracemalloc on
# CPython 3.11: a Step holds ~230 B, an int above 256 in Hello.ranks ~40 B, a device map entry ~57 B.
RECORD_MEMORY_BYTES: Final[int] = 320
ITEM_MEMORY_BYTES: Final[int] = 64

_GETTERS: Final = {kind: attrgetter(*(f.name for f in specs)) for kind, specs in FIELDS.items()}
_FIELD_COUNT: Final = {kind: len(specs) for kind, specs in FIELDS.items()}
_SHOW_CHARS: Final[int] = 40
# What msgpack itself refuses before allocating anything: a declared length no message of this format has (random
# bytes often declare one) is "malformed", like any other garbage, and costs microseconds, not the milliseconds of
# unpacking 8193 records to count them. Lists just over a field's own limit (ranks, devices) are judged by
# validation ("limit", naming the field).
_UNPACK_LIMITS: Final[dict[str, int]] = {
    "max_array_len": max(MAX_RECORDS_PER_MESSAGE, MAX_HELLO_RANKS, MAX_HELLO_DEVICES),
    "max_map_len": max(MAX_DEVICE_KEYS, 16),
    "max_str_len": 4 * MAX_TEXT_CHARS,  # bytes of UTF-8; the character limit is checked per field
    "max_bin_len": 4 * MAX_TEXT_CHARS,  # bin is never valid; small ones get through to be named in the error
    "max_ext_len": 4 * MAX_TEXT_CHARS,
}


class WireError(ValueError):
    """A received message that cannot be accepted. ``reason`` is a short stable code (``REASONS``) for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class Batch:
    """One decoded, validated message: who sent it, its sequence number, and its records.

    ``skipped`` counts records of unknown kinds (from a newer minor version) that were left out. ``size_bytes`` is
    the message's size on the wire; ``memory_bytes`` an upper estimate of what the decoded batch holds in memory
    (what receivers bound their queues by), its message included. ``raw`` is the message itself as it was decoded
    (bytes; None for a batch built in memory): a receiver that forwards it to another process sends these bytes, not
    a re-encoding.
    """

    agent_id: str
    seq: int
    sent_s: float
    version: tuple[int, int]
    records: list[Record]
    skipped: int = 0
    size_bytes: int = 0
    memory_bytes: int = 0
    raw: bytes | None = None


# ---- Public API --------------------------------------------------------------------------------------------------


def encode(agent_id: str, seq: int, sent_s: float, records: Iterable[Record]) -> bytes:
    """Pack records into one message. Runs on the agent's sender thread, never the training thread."""
    body = [[rec.KIND, list(_GETTERS[rec.KIND](rec))] for rec in records]
    envelope = {"v": list(SCHEMA_VERSION), "a": agent_id, "q": seq, "t": sent_s, "r": body}
    return msgpack.packb(envelope, use_bin_type=True)


def decode(data: bytes | memoryview) -> Batch:
    """Unpack and validate one message. Raises ``WireError`` (never anything else) when it is not acceptable."""
    try:
        return _decode(data)
    except WireError:
        raise
    except Exception as exc:  # a bug here must cost one message, never the receiver: say what happened
        raise WireError("malformed", f"the message could not be judged ({type(exc).__name__}); it was dropped "
                                     "— please report this with the message if it came from a Ringscope agent"
                        ) from None


def record_values(record: Record) -> tuple[Any, ...]:
    """A record's field values in schema order (for recorders and tables)."""
    values = _GETTERS[record.KIND](record)
    return values if isinstance(values, tuple) else (values,)


def encode_raw(envelope: dict[str, Any]) -> bytes:
    """Pack an arbitrary envelope (for tests and tools that need to send deliberately wrong messages)."""
    return msgpack.packb(envelope, use_bin_type=True)


def values_of(records: Sequence[Record]) -> list[tuple[Any, ...]]:
    """Field-value tuples of many records of one kind (for batched SQL inserts)."""
    return [record_values(r) for r in records]


# ---- Envelope ----------------------------------------------------------------------------------------------------


def _decode(data: bytes | memoryview) -> Batch:
    size = len(data)
    if size > MAX_MESSAGE_BYTES:
        raise WireError("oversized", f"{size} bytes > limit {MAX_MESSAGE_BYTES}; agents split larger batches")
    try:
        envelope = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True, ext_hook=_no_ext,
                                   **_UNPACK_LIMITS)
    except WireError:
        raise
    except msgpack.StackError:
        raise WireError("malformed", "nested deeper than msgpack's limit (~1000 levels); the format nests 4 deep"
                        ) from None
    except ValueError as exc:
        if "exceeds max_" in str(exc):
            raise WireError("malformed", f"declares a list, map or string longer than any message of this format "
                                         f"({_clip(str(exc))})") from None
        raise WireError("malformed", f"not a msgpack message ({type(exc).__name__}: {_clip(str(exc))})") from None
    except Exception as exc:  # msgpack raises several unrelated types for garbage input
        raise WireError("malformed", f"not a msgpack message ({type(exc).__name__}: {_clip(str(exc))})") from None
    if type(envelope) is not dict:
        raise WireError("malformed", f"envelope is {_show(envelope)}, expected a map")
    version = _check_version(envelope.get("v"))
    agent_id = envelope.get("a")
    seq = envelope.get("q")
    sent_s = envelope.get("t")
    body = envelope.get("r")
    if type(agent_id) is not str or not agent_id or len(agent_id) > 256:
        raise WireError("malformed", f"agent id must be a string of 1..256 characters, got {_show(agent_id)}")
    # Envelope values are part of the format: whatever is wrong with them is "malformed".
    if type(seq) is not int or not 0 <= seq <= INT_MAX:
        raise WireError("malformed", f"sequence number must be an integer within 0..2^63-1, got {_show(seq)}")
    if type(sent_s) is int:
        sent_s = float(sent_s)
    if type(sent_s) is not float or not -MAX_ABS_SECONDS <= sent_s <= MAX_ABS_SECONDS:
        raise WireError("malformed", f"send time must be finite seconds within +-{MAX_ABS_SECONDS:g}, got "
                                     f"{_show(sent_s)}")
    if type(body) is not list:
        raise WireError("malformed", f"records must be a list, got {_show(body)}")
    if len(body) > MAX_RECORDS_PER_MESSAGE:
        raise WireError("limit", f"{len(body)} records in one message > limit {MAX_RECORDS_PER_MESSAGE}")
    records: list[Record] = []
    skipped = 0
    items = 0
    for index, item in enumerate(body):
        record = _decode_record(index, item)
        if record is None:
            skipped += 1
            continue
        records.append(record)
        if isinstance(record, Hello):
            items += len(record.ranks) + sum(len(device) for device in record.devices)
    raw = data if type(data) is bytes else None
    memory = size * (2 if raw is not None else 1) + RECORD_MEMORY_BYTES * len(body) + ITEM_MEMORY_BYTES * items
    return Batch(agent_id, seq, sent_s, version, records, skipped, size, memory, raw)


def _check_version(raw: Any) -> tuple[int, int]:
    if type(raw) is not list or len(raw) != 2 or not all(type(part) is int and 0 <= part <= 65535 for part in raw):
        raise WireError("malformed", f"schema version must be [major, minor] (0..65535), got {_show(raw)}")
    major, minor = raw
    if major != SCHEMA_VERSION[0]:
        raise WireError(
            "version",
            f"message uses schema {major}.{minor} but this collector speaks {SCHEMA_VERSION[0]}.x; "
            "run the same major Ringscope version in the agents and the app",
        )
    return major, minor


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError("malformed", f"msgpack extension type {code} ({len(data)} bytes) is not part of the format")


# ---- Records -----------------------------------------------------------------------------------------------------

# How each field's value is judged, derived once from the schema (see ``_rule``).
_INT, _RANK, _SECONDS, _READING, _TEXT, _BOOL, _RANKS, _DEVICES = range(8)
_RULE_WORDS: Final = {
    _INT: "an integer", _RANK: "an integer", _SECONDS: "a number of seconds", _READING: "a number",
    _TEXT: "text (a msgpack str)", _BOOL: "true or false", _RANKS: "a flat list of ranks (ints)",
    _DEVICES: "a list of flat maps",
}


def _rule(kind: str, spec: FieldSpec) -> int:
    """The rule for one field: by its type, and for numbers by its name (units are in names)."""
    if list in spec.types:
        rules = {"ranks": _RANKS, "devices": _DEVICES}
        if spec.name not in rules:  # a new list field needs a rule here before it can be received
            raise TypeError(f"ringscope.agent.wire has no validation rule for list field {kind}.{spec.name}")
        return rules[spec.name]
    if float in spec.types:
        return _SECONDS if spec.name.endswith("_s") else _READING
    if bool in spec.types:
        return _BOOL
    if int in spec.types:
        return _RANK if spec.name in RANK_FIELDS else _INT
    return _TEXT


_RULES: Final[dict[str, tuple[tuple[str, int, bool], ...]]] = {
    kind: tuple((spec.name, _rule(kind, spec), spec.optional) for spec in specs) for kind, specs in FIELDS.items()
}


def _decode_record(index: int, item: Any) -> Record | None:
    if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
        raise WireError("malformed", f"record {index} must be [kind, [values]], got {_show(item)}")
    kind, values = item
    cls = KINDS.get(kind)
    if cls is None:
        return None  # a newer minor version's record kind: skip, counted by the caller
    if type(values) is not list:
        raise WireError("malformed", f"record {index} ({kind}) values must be a list, got {_show(values)}")
    count = _FIELD_COUNT[kind]
    if len(values) < REQUIRED_COUNT[kind]:
        raise WireError(
            "malformed", f"record {index} ({kind}) has {len(values)} values, needs at least {REQUIRED_COUNT[kind]}"
        )
    if len(values) > count:
        del values[count:]  # trailing fields from a newer minor version
    fast = _FAST[kind]
    if fast is not None and fast(values):
        return cls(*values)  # type: ignore[no-any-return]
    return _judge_fields(index, kind, cls, values)


def _judge_fields(index: int, kind: str, cls: type, values: list[Any]) -> Record:
    """Every field judged by its rule, one by one: converts what the format allows (ints in float fields, a
    non-finite optional reading) and names the first field that is wrong."""
    rules = _RULES[kind]
    for position, value in enumerate(values):
        name, rule, optional = rules[position]
        if value is None:
            if not optional:
                raise WireError("type", f"record {index} ({kind}) field {name} must not be null")
            continue
        value_type = type(value)
        if rule == _SECONDS:
            if value_type is not float:
                if value_type is not int:
                    raise _wrong_type(index, kind, name, rule, value)
                value = values[position] = float(value)  # SQLite cannot bind ints beyond 64 bits as REAL
            if not -MAX_ABS_SECONDS <= value <= MAX_ABS_SECONDS:  # False for NaN too
                raise WireError("range", f"record {index} ({kind}) field {name} must be finite seconds within "
                                         f"+-{MAX_ABS_SECONDS:g}, got {_show(value)}")
        elif rule == _READING:
            if value_type is not float:
                if value_type is not int:
                    raise _wrong_type(index, kind, name, rule, value)
                value = values[position] = float(value)
            if not math.isfinite(value):
                if not optional:
                    raise WireError("range", f"record {index} ({kind}) field {name} must be finite, got "
                                             f"{_show(value)}")
                # a non-finite reading is no reading (see ringscope.agent.schema.MAX_ABS_SECONDS)
                values[position] = None
        elif rule == _INT:
            if value_type is not int:
                raise _wrong_type(index, kind, name, rule, value)
            if not INT_MIN <= value <= INT_MAX:
                raise WireError("range", f"record {index} ({kind}) field {name} must fit in 64 signed bits, got "
                                         f"{_show(value)}")
        elif rule == _RANK:
            if value_type is not int:
                raise _wrong_type(index, kind, name, rule, value)
            if not 0 <= value <= MAX_RANK:
                raise WireError("range", f"record {index} ({kind}) field {name} must be within 0..{MAX_RANK}, "
                                         f"got {_show(value)}")
        elif rule == _TEXT:
            if value_type is not str:
                raise _wrong_type(index, kind, name, rule, value)
            if len(value) > MAX_TEXT_CHARS:
                raise WireError("limit", f"record {index} ({kind}) field {name} has {len(value)} characters > "
                                         f"limit {MAX_TEXT_CHARS}")
        elif rule == _BOOL:
            if value_type is not bool:
                raise _wrong_type(index, kind, name, rule, value)
        elif rule == _RANKS:
            _check_ranks(index, kind, name, value)
        else:
            _check_devices(index, kind, name, value)
    return cls(*values)  # type: ignore[no-any-return]


# ---- The fast path -------------------------------------------------------------------------------------------------
#
# Nearly every record a collector receives already has exactly the types its fields' rules want (floats in float
# fields, ints in int fields, None only where a field is optional) and values in range. For each kind, ``_FAST``
# holds a check of exactly that, generated from the schema as straight-line code (one line per field, no loop and
# no rule dispatch: ~0.9 µs for a step against ~1.6 µs for ``_judge_fields``). Any record it does not accept goes to
# ``_judge_fields``, which converts or names the wrong field exactly as before: the fast path only ever accepts what
# ``_judge_fields`` accepts unchanged (``tests/agent/test_wire_fast_path.py`` holds the two to that).

_FAST_TESTS: Final[dict[int, str]] = {
    _INT: "type({v}) is int and INT_MIN <= {v} <= INT_MAX",
    _RANK: "type({v}) is int and 0 <= {v} <= MAX_RANK",
    _SECONDS: "type({v}) is float and -MAX_ABS_SECONDS <= {v} <= MAX_ABS_SECONDS",  # False for NaN too
    _READING: "type({v}) is float and {v} - {v} == 0.0",  # finite
    _TEXT: "type({v}) is str and len({v}) <= MAX_TEXT_CHARS",
    _BOOL: "type({v}) is bool",
}


def _fast_check(kind: str) -> Callable[[list[Any]], bool] | None:
    """The generated check for records of ``kind`` (None for a kind with list fields: hello, judged field by field).
    The generated code holds nothing received: only variables ``v0``, ``v1``, ... and the schema's limits."""
    rules = _RULES[kind]
    if any(rule not in _FAST_TESTS for _, rule, _ in rules):
        return None
    lines = ["def check(values):", f"    if len(values) != {len(rules)}:", "        return False",
             f"    {', '.join(f'v{i}' for i in range(len(rules)))}, = values"]
    for i, (_, rule, optional) in enumerate(rules):
        test = _FAST_TESTS[rule].format(v=f"v{i}")
        lines.append(f"    if not ({f'v{i} is None or ' if optional else ''}{test}):")
        lines.append("        return False")
    lines.append("    return True")
    namespace: dict[str, Any] = {"INT_MIN": INT_MIN, "INT_MAX": INT_MAX, "MAX_RANK": MAX_RANK,
                                 "MAX_ABS_SECONDS": MAX_ABS_SECONDS, "MAX_TEXT_CHARS": MAX_TEXT_CHARS}
    exec("\n".join(lines), namespace)
    return namespace["check"]  # type: ignore[no-any-return]


_FAST: Final[dict[str, Callable[[list[Any]], bool] | None]] = {kind: _fast_check(kind) for kind in FIELDS}


def _check_list(index: int, kind: str, name: str, value: Any, expected: int, limit: str, noun: str,
                max_items: int) -> None:
    """``value`` is a list (of type code ``expected``) of at most ``max_items`` ``noun`` (e.g. "ranks"), else a
    ``WireError`` naming it; ``limit`` says the limit, e.g. "64 per agent"."""
    if type(value) is not list:
        raise _wrong_type(index, kind, name, expected, value)
    if len(value) > max_items:
        raise WireError("limit", f"record {index} ({kind}) field {name} lists {len(value)} {noun} > limit {limit}")


def _check_ranks(index: int, kind: str, name: str, value: Any) -> None:
    _check_list(index, kind, name, value, _RANKS, f"{MAX_HELLO_RANKS} per agent", "ranks", MAX_HELLO_RANKS)
    for rank in value:
        if type(rank) is not int:
            raise WireError("type", f"record {index} ({kind}) field {name} must be a flat list of ints, holds "
                                    f"{_show(rank)}")
        if not 0 <= rank <= MAX_RANK:
            raise WireError("range", f"record {index} ({kind}) field {name} holds rank {_show(rank)} outside "
                                     f"0..{MAX_RANK}")


_DEVICE_SCALARS: Final = (str, int, float, bool)


def _check_devices(index: int, kind: str, name: str, value: Any) -> None:
    _check_list(index, kind, name, value, _DEVICES, f"{MAX_HELLO_DEVICES}", "devices", MAX_HELLO_DEVICES)
    where = f"record {index} ({kind}) field {name}"
    for device in value:
        if type(device) is not dict:
            raise WireError("type", f"{where} must hold maps, holds {_show(device)}")
        if len(device) > MAX_DEVICE_KEYS:
            raise WireError("limit", f"{where} holds a map of {len(device)} keys > limit {MAX_DEVICE_KEYS}")
        for key, item in device.items():
            if type(key) is not str:
                raise WireError("type", f"{where} has a map key that is not text: {_show(key)}")
            if not key or len(key) > MAX_KEY_CHARS:
                raise WireError("limit", f"{where} has a key of {len(key)} characters (1..{MAX_KEY_CHARS})")
            item_type = type(item)
            if item is None or item_type is bool:
                continue
            entry = f"{where}[{key[:_SHOW_CHARS]!r}]"
            if item_type not in _DEVICE_SCALARS:
                raise WireError("type", f"{entry} must be null, a number or text, got {_show(item)}")
            if item_type is int and not INT_MIN <= item <= INT_MAX:
                raise WireError("range", f"{entry} must fit in 64 signed bits, got {_show(item)}")
            if item_type is float and not math.isfinite(item):
                device[key] = None  # a non-finite reading is no reading, as for record fields
            if item_type is str and len(item) > MAX_TEXT_CHARS:
                raise WireError("limit", f"{entry} has {len(item)} characters > {MAX_TEXT_CHARS}")


def _wrong_type(index: int, kind: str, name: str, rule: int, value: Any) -> WireError:
    return WireError("type", f"record {index} ({kind}) field {name} must be {_RULE_WORDS[rule]}, got "
                             f"{_show(value)}")


# ---- Error texts -------------------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A short description of a received value for an error text: bounded length, no recursion, escaped."""
    value_type = type(value)
    if value is None or value_type in (bool, float):
        return repr(value)
    if value_type is int:
        return repr(value) if abs(value) < 10**30 else f"an integer of {value.bit_length()} bits"
    if value_type in (str, bytes):
        more = f"... ({len(value)} long)" if len(value) > _SHOW_CHARS else ""
        return f"{value_type.__name__} {value[:_SHOW_CHARS]!r}{more}"
    if value_type is list:
        return f"a list of {len(value)} item(s)"
    if value_type is dict:
        return f"a map of {len(value)} key(s)"
    return f"a {value_type.__name__}"


def _clip(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."

