"""decode judges values, not only types: everything it accepts can be stored in SQLite and printed as standard JSON,
every hostile message gets its stable reason, and nothing but WireError ever comes out of it."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import time

import msgpack
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import INT_MAX, INT_MIN, MAX_RANK, SCHEMA_VERSION, GpuSample, Health, Step
from ringscope.gui.core.ingest.session_schema import create_statements, insert_statement
from tests.agent import hostile


@pytest.mark.parametrize(("name", "payload", "reason"), hostile.catalogue(), ids=[c[0] for c in hostile.catalogue()])
def test_every_hostile_message_is_rejected_with_its_reason(name: str, payload: bytes, reason: str) -> None:
    with pytest.raises(wire.WireError) as info:
        wire.decode(payload)
    assert info.value.reason == reason, info.value.detail
    assert info.value.reason in wire.REASONS
    assert 0 < len(info.value.detail) < 400  # names what was wrong without dumping the value


def test_the_limits_themselves_are_accepted() -> None:
    step = Step(MAX_RANK, INT_MAX, -1e10, 1e10, 0.0, epoch=INT_MIN, samples=INT_MAX)
    batch = wire.decode(wire.encode("edge", INT_MAX, 1e10, [step, hostile.hello(ranks=list(range(4096)))]))
    assert batch.seq == INT_MAX and batch.records[0] == step and len(batch.records[1].ranks) == 4096


def test_non_finite_optional_readings_become_none_and_ints_in_float_fields_become_floats() -> None:
    values = [1.0, "h", 0, None, None, None, float("nan"), float("inf"), 5, None, float("-inf"), 2**64 - 1]
    device = {"index": 0, "power": float("nan"), "name": "gpu", "ok": True, "none": None}
    payload = hostile.envelope([["gpu", values], ["step", hostile.step_values(start_s=1) + [None] * 5 + [float("nan")]],
                                ["hello", list(wire.record_values(hostile.hello(devices=[device])))]])
    gpu, step, hello = wire.decode(payload).records
    assert isinstance(gpu, GpuSample) and gpu.util_pct is None and gpu.mem_util_pct is None
    assert gpu.power_w is None and gpu.mem_used_bytes == 5
    assert gpu.energy_j == float(2**64 - 1)  # an int too large for SQLite in a float field: stored as REAL
    assert isinstance(step, Step) and step.loss is None and type(step.start_s) is float and step.start_s == 1.0
    assert hello.devices == [{"index": 0, "power": None, "name": "gpu", "ok": True, "none": None}]


def test_accepted_values_can_be_stored_and_printed_as_standard_json(tmp_path) -> None:
    # What used to stop the recorder: each accepted value is bound to a real SQLite row and dumped as strict JSON.
    health = Health(1.0, 0, 1, 2, 3, 4, 5, 6, disconnects=INT_MAX)
    batch = wire.decode(wire.encode("store", 0, 1.0, [health, hostile.hello(devices=[{"k": 1.5}], ranks=[1, 2])]))
    connection = sqlite3.connect(tmp_path / "s.db")
    for statement in create_statements():
        connection.execute(statement)
    for record in batch.records:
        values = [json.dumps(v, allow_nan=False) if isinstance(v, list) else v for v in wire.record_values(record)]
        if record.KIND == "hello":
            values.pop(1)  # agent_id lives in the envelope column
        connection.execute(insert_statement(record.KIND), ["store", 1.0, *values])
    assert connection.execute("SELECT disconnects FROM health").fetchone() == (INT_MAX,)
    connection.close()


def test_a_health_from_an_older_agent_without_disconnects_is_accepted() -> None:
    old = hostile.envelope([["health", [1.0, 0, 1, 2, 3, 4, 5, 6]]], version=[SCHEMA_VERSION[0], 0])
    (health,) = wire.decode(old).records
    assert isinstance(health, Health) and health.disconnects is None and health.last_seq == 6


def test_mutated_valid_messages_only_ever_raise_wire_error_and_accepted_ones_are_storable() -> None:
    rng = random.Random(14)
    seeds = [wire.encode("m", 3, 1.0, [hostile.hello(devices=[{"a": 1, "b": "x"}]), Step(0, 1, 1.0, 2.0, 1.0,
                                                                                          loss=0.5)]),
             wire.encode("m", 4, 1.0, [Health(1.0, 0, 1, 2, 3, 4, 5, 6, 7)])]
    accepted = rejected = 0
    started = time.monotonic()
    for _ in range(20_000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            batch = wire.decode(bytes(data))
        except wire.WireError as exc:
            assert exc.reason in wire.REASONS
            rejected += 1
            continue
        accepted += 1
        for record in batch.records:
            for value in wire.record_values(record):
                if isinstance(value, int) and not isinstance(value, bool):
                    assert INT_MIN <= value <= INT_MAX
                elif isinstance(value, float):
                    assert math.isfinite(value)
                elif isinstance(value, list):
                    json.dumps(value, allow_nan=False)
    assert accepted > 100 and rejected > 1000, (accepted, rejected)
    assert time.monotonic() - started < 30


def test_decode_never_raises_anything_but_wire_error_on_deep_or_random_input() -> None:
    for depth in (1, 100, 999, 1000, 1005, 1023, 1024, 1025, 5000):
        for payload in (hostile.raw_nested(depth), b"\x81\xa1r" + hostile.raw_nested(depth),
                        hostile.envelope_with_raw_records(hostile.raw_nested(depth))):
            with pytest.raises(wire.WireError):
                wire.decode(payload)
    rng = random.Random(1)
    for _ in range(5000):
        try:
            wire.decode(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
        except wire.WireError:
            pass


def test_a_map_with_integer_keys_or_a_message_of_many_small_maps_is_rejected_cheaply() -> None:
    with pytest.raises(wire.WireError) as info:
        wire.decode(msgpack.packb({1: 2}))
    assert info.value.reason == "malformed"
    many = hostile.envelope([["step", hostile.step_values()]] * 8192)
    started = time.perf_counter()
    assert len(wire.decode(many).records) == 8192  # the most records a message may hold: still accepted
    assert time.perf_counter() - started < 1.0
