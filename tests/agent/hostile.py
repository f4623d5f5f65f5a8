"""A catalogue of hostile messages (each with the rejection reason it must get), shared by the wire tests and the
collector fuzz tests. Every message that once stopped the recorder or broke ``decode`` is in here."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import msgpack

from ringscope.agent import wire
from ringscope.agent.schema import MAX_HELLO_DEVICES, MAX_HELLO_RANKS, MAX_TEXT_CHARS, SCHEMA_VERSION, Hello


def hello(agent_id: str = "hostile", **changes: Any) -> Hello:
    """A valid Hello, with fields replaced by ``changes``."""
    values: dict[str, Any] = dict(
        run_id="fuzz", agent_id=agent_id, host="h", pid=1, rank=0, local_rank=0, world_size=1, node_rank=0,
        ranks=[0], framework="other", strategy="ddp", backend=None, devices=[], agent_version="0.1.0",
        schema_version="1.1", clock_wall_s=1.0, clock_mono_s=1.0, started_s=1.0)
    values.update(changes)
    return Hello(**values)


def envelope(records: list[Any], *, agent_id: Any = "hostile", seq: Any = 0, sent_s: Any = 1.0,
             version: Any = None) -> bytes:
    """Pack an envelope exactly as given (no validation)."""
    return msgpack.packb({"v": list(SCHEMA_VERSION) if version is None else version, "a": agent_id, "q": seq,
                          "t": sent_s, "r": records}, use_bin_type=True)


def envelope_with_raw_records(raw_records: bytes, *, agent_id: str = "hostile") -> bytes:
    """An envelope whose ``r`` value is the given msgpack bytes (for nesting deeper than ``packb`` allows)."""
    head = b"".join(msgpack.packb(part) for part in ("v", list(SCHEMA_VERSION), "a", agent_id, "q", 0, "t", 1.0, "r"))
    return b"\x85" + head + raw_records


def hello_with_raw_ranks(raw_ranks: bytes, agent_id: str = "hostile") -> bytes:
    """A Hello whose ``ranks`` value is the given msgpack bytes."""
    fields = list(wire.record_values(hello(agent_id)))
    before = b"".join(msgpack.packb(v) for v in fields[:8])
    after = b"".join(msgpack.packb(v) for v in fields[9:])
    values = bytes([0xDC]) + len(fields).to_bytes(2, "big") + before + raw_ranks + after  # array16 of the values
    record = b"\x92" + msgpack.packb("hello") + values
    return envelope_with_raw_records(b"\x91" + record, agent_id=agent_id)


def hello_with(position_name: str, value: Any, agent_id: str = "hostile") -> bytes:
    """A Hello whose field ``position_name`` holds ``value`` (any msgpack value, however wrong)."""
    fields = list(wire.record_values(hello(agent_id)))
    names = [f.name for f in dataclasses.fields(Hello)]
    fields[names.index(position_name)] = value
    return envelope([["hello", fields]], agent_id=agent_id)


def step_values(**changes: Any) -> list[Any]:
    values: dict[str, Any] = {"rank": 0, "step": 1, "start_s": 1.0, "end_s": 2.0, "step_s": 1.0}
    values.update(changes)
    return list(values.values())


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def raw_nested(depth: int) -> bytes:
    """``depth`` one-element arrays around an empty one, built as bytes (packb itself refuses deep nesting)."""
    return b"\x91" * depth + b"\x90"


def catalogue() -> list[tuple[str, bytes, str]]:
    """(name, message, reason) for every kind of hostile message."""
    step = [["step", step_values()]]
    big_step_text = msgpack.packb({"v": list(SCHEMA_VERSION), "a": "hostile", "q": 0, "t": 1.0,
                                   "r": [["event", [1.0, "x" * (MAX_TEXT_CHARS + 1)]]]})
    return [
        # integers SQLite cannot store
        ("step int >= 2**63", envelope([["step", step_values(step=2**63)]]), "range"),
        ("step int 2**64-1", envelope([["step", step_values(step=2**64 - 1)]]), "range"),
        ("step rank 2**63", envelope([["step", step_values(rank=2**63)]]), "range"),
        ("negative rank", envelope([["step", step_values(rank=-1)]]), "range"),
        ("health counter 2**64-1", envelope([["health", [1.0, 0, 1, 2**64 - 1, 0, 0, 0, 0]]]), "range"),
        ("seq 2**64-1", envelope(step, seq=2**64 - 1), "malformed"),
        ("seq negative", envelope(step, seq=-5), "malformed"),
        # seconds that are not finite or absurd
        ("end_s inf", envelope([["step", step_values(end_s=float("inf"))]]), "range"),
        ("start_s nan", envelope([["step", step_values(start_s=float("nan"))]]), "range"),
        ("step_s -inf", envelope([["step", step_values(step_s=float("-inf"))]]), "range"),
        ("ts 1e300", envelope([["event", [1e300, "x"]]]), "range"),
        ("start_s int 2**64-1", envelope([["step", step_values(start_s=2**64 - 1)]]), "range"),
        ("sent_s inf", envelope(step, sent_s=float("inf")), "malformed"),
        # nesting and shapes
        ("ranks nested 990 deep", hello_with_raw_ranks(b"\x91" + raw_nested(990)), "type"),
        ("ranks nested list", hello_with("ranks", [[1, 2]]), "type"),
        ("ranks too many", hello_with("ranks", list(range(MAX_HELLO_RANKS + 1))), "limit"),
        ("ranks not a list", hello_with("ranks", {"0": 1}), "type"),
        ("devices too many", hello_with("devices", [{}] * (MAX_HELLO_DEVICES + 1)), "limit"),
        ("devices bin value", hello_with("devices", [{"k": b"\x00\x01"}]), "type"),
        ("devices bytes key", hello_with("devices", [{b"k": 1}]), "type"),
        ("devices nested map", hello_with("devices", [{"k": {"deeper": 1}}]), "type"),
        ("devices nested list", hello_with("devices", [{"k": nested(50)}]), "type"),
        ("devices int 2**64-1", hello_with("devices", [{"k": 2**64 - 1}]), "range"),
        ("devices list of lists", hello_with("devices", [[1, 2]]), "type"),
        ("text is bin", hello_with("host", b"host-as-bytes"), "type"),
        ("run id is bin", hello_with("run_id", b"\xff\xfe"), "type"),
        ("text too long", big_step_text, "limit"),
        ("msgpack ext", msgpack.packb({"v": list(SCHEMA_VERSION), "a": "hostile", "q": 0, "t": 1.0,
                                       "r": [["step", [msgpack.ExtType(7, b"xx"), 1, 1.0, 2.0, 1.0]]]}), "malformed"),
        ("msgpack timestamp", envelope([["step", step_values(start_s=msgpack.Timestamp(1, 0))]]), "type"),
        ("too many records", envelope([["step", step_values()]] * (wire.MAX_RECORDS_PER_MESSAGE + 1)), "malformed"),
        ("device map too many keys", hello_with("devices", [{f"k{i}": i for i in range(65)}]), "malformed"),
        # decode's own error texts must survive these
        ("deep envelope 1005", raw_nested(1005), "malformed"),
        ("deep envelope 100k", raw_nested(100_000), "malformed"),
        ("ranks declared 2**32 long", hello_with_raw_ranks(b"\xdd\xff\xff\xff\xff"), "malformed"),
        ("deep version", b"\x81\xa1v" + raw_nested(1000), "malformed"),
        ("deep record", envelope_with_raw_records(b"\x91" + raw_nested(980)), "malformed"),
        ("garbage", b"\xc1" + os.urandom(64), "malformed"),
        ("truncated", wire.encode("hostile", 0, 1.0, [hello()])[:-9], "malformed"),
        ("version", envelope(step, version=[SCHEMA_VERSION[0] + 1, 0]), "version"),
        ("oversized", b"\x00" * (wire.MAX_MESSAGE_BYTES + 1), "oversized"),
    ]


def stream(count: int, *, seed: int = 0) -> Iterator[tuple[bytes, str]]:
    """``count`` hostile messages cycling through the catalogue (the 4 MB ones rarely: they dominate the time)."""
    entries = [(payload, reason) for name, payload, reason in catalogue() if len(payload) < 1_000_000]
    big = [(payload, reason) for name, payload, reason in catalogue() if len(payload) >= 1_000_000]
    for i in range(count):
        if big and i % 5000 == 4999:
            yield big[(i // 5000) % len(big)]
        else:
            yield entries[(i + seed) % len(entries)]
