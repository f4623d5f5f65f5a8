"""Round trips of every record kind and rejection of everything malformed, with a stable reason."""

from __future__ import annotations

import os

import msgpack
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import SCHEMA_VERSION, Event, GpuSample, Health, Hello, HostSample, Step


def _records() -> list:
    hello = Hello("run", "a1", "host", 12, 0, 0, 2, None, [0], "pytorch", "ddp", "gloo", [{"index": 0}], "0.1.0",
                  "1.0", 1.0, 2.0, 3.0)
    return [hello, Step(0, 1, 1.0, 2.0, 1.0, data_wait_s=0.1), GpuSample(1.0, "h", 0, util_pct=50.0),
            HostSample(1.0, "h", cpu_pct=3.0), Event(1.0, "checkpoint_saved", bytes=10),
            Health(1.0, 0, 8, 0, 1, 1, 0, 0)]


def test_every_kind_round_trips() -> None:
    records = _records()
    batch = wire.decode(wire.encode("a1", 5, 9.0, records))
    assert (batch.agent_id, batch.seq, batch.sent_s, batch.skipped) == ("a1", 5, 9.0, 0)
    assert batch.records == records


def _ok(**changes: object) -> dict:
    envelope = {"v": list(SCHEMA_VERSION), "a": "a1", "q": 0, "t": 1.0, "r": [["step", [0, 1, 1.0, 2.0, 1.0]]]}
    envelope.update(changes)
    return envelope


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (os.urandom(64) + b"\xc1", "malformed"),
        (wire.encode("a1", 0, 1.0, _records())[:-7], "malformed"),
        (msgpack.packb([1, 2, 3]), "malformed"),
        (wire.encode_raw(_ok(q=-1)), "malformed"),
        (wire.encode_raw(_ok(a="")), "malformed"),
        (wire.encode_raw(_ok(r=[["step", ["zero", 1, 1.0, 2.0, 1.0]]])), "type"),
        (wire.encode_raw(_ok(r=[["step", [True, 1, 1.0, 2.0, 1.0]]])), "type"),
        (wire.encode_raw(_ok(r=[["step", [None, 1, 1.0, 2.0, 1.0]]])), "type"),
        (wire.encode_raw(_ok(r=[["step", [0, 1]]])), "malformed"),
        (wire.encode_raw(_ok(v=[99, 0])), "version"),
        (b"\x00" * (wire.MAX_MESSAGE_BYTES + 1), "oversized"),
    ],
)
def test_bad_messages_raise_wire_error_with_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(wire.WireError) as info:
        wire.decode(payload)
    assert info.value.reason == reason
    assert info.value.detail


def test_random_garbage_only_ever_raises_wire_error() -> None:
    for size in range(1, 400):
        try:
            wire.decode(os.urandom(size))
        except wire.WireError:
            pass
