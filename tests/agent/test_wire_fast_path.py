"""decode's fast path (a check generated per kind from the schema) accepts only what the field-by-field judge accepts
unchanged, and it does carry the records a collector gets: steps and readings of well-typed, in-range values."""

from __future__ import annotations

import random
from typing import Any

import msgpack

from ringscope.agent import wire
from ringscope.agent.schema import (
    FIELDS,
    INT_MAX,
    INT_MIN,
    KINDS,
    MAX_ABS_SECONDS,
    MAX_RANK,
    MAX_TEXT_CHARS,
    RANK_FIELDS,
    REQUIRED_COUNT,
    GpuSample,
    Step,
)
from tests.agent import hostile

NAN, INF = float("nan"), float("inf")
# Values each field may be given: fitting ones (typical and at the limits) and every near miss of type and range.
FLOATS = [0.0, 0.25, 1.7e9, -MAX_ABS_SECONDS, MAX_ABS_SECONDS, MAX_ABS_SECONDS * 1.0000001, -MAX_ABS_SECONDS * 2,
          1e300, NAN, INF, -INF]
INTS = [0, 7, 2**40, INT_MIN, INT_MAX, INT_MAX + 1, 2**64 - 1, -1, MAX_RANK, MAX_RANK + 1]
OTHERS = [None, True, False, "text", "x" * MAX_TEXT_CHARS, "x" * (MAX_TEXT_CHARS + 1), "", b"bytes", [1], {"k": 1}]
POOL = FLOATS + INTS + OTHERS


def typical(spec: Any, rng: random.Random) -> Any:
    """A value of the field's own type that is in range (what agents send)."""
    if float in spec.types:
        return rng.choice([0.0, 0.125, 1.7e9 + rng.random()])
    if bool in spec.types:
        return rng.choice([True, False])
    if int in spec.types:
        return rng.randrange(0, MAX_RANK) if spec.name in RANK_FIELDS else rng.randrange(INT_MIN, INT_MAX)
    return "gpu-name"


def judged(kind: str, values: list[Any]) -> tuple[str, Any]:
    """What the field-by-field judge alone makes of ``values``: the record's typed values, or the error's reason."""
    try:
        record = wire._judge_fields(0, kind, KINDS[kind], list(values))
    except wire.WireError as exc:
        return "rejected", exc.reason
    return "accepted", [(type(v), v) for v in wire.record_values(record)]


def decoded(kind: str, values: list[Any]) -> tuple[str, Any]:
    """What ``decode`` (fast path first) makes of one record with ``values``."""
    try:
        batch = wire.decode(hostile.envelope([[kind, list(values)]]))
    except wire.WireError as exc:
        return "rejected", exc.reason
    return "accepted", [(type(v), v) for v in wire.record_values(batch.records[0])]


def test_the_fast_path_accepts_only_what_the_judge_accepts_unchanged() -> None:
    rng = random.Random(29)
    fast_kinds = [kind for kind in FIELDS if wire._FAST[kind] is not None]
    assert {"step", "gpu", "host", "health"} <= set(fast_kinds)
    taken = {kind: 0 for kind in fast_kinds}
    for _ in range(30_000):
        kind = rng.choice(fast_kinds)
        specs = FIELDS[kind]
        values = [typical(spec, rng) for spec in specs]
        for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):  # some records stay typical, the others get near misses
            values[rng.randrange(len(values))] = rng.choice(POOL)
        if rng.random() < 0.1:
            del values[rng.randint(REQUIRED_COUNT[kind], len(values)):]  # an older agent: fewer trailing fields
        expected = judged(kind, values)
        if wire._FAST[kind](list(values)):
            taken[kind] += 1
            # accepted by the fast path: the judge must accept it too, without converting a single value
            assert expected == ("accepted", [(type(v), v) for v in values]), (kind, values)
        with_nan = any(type(v) is float and v != v for v in values)
        if not with_nan:  # NaN != NaN: compare whole outcomes only where equality means something
            assert decoded(kind, values) == expected, (kind, values)
        else:
            assert decoded(kind, values)[0] == expected[0], (kind, values)
    # the fast path is not a dead branch: it takes a large share of every kind's records
    assert all(count > 1000 for count in taken.values()), taken


def test_what_an_agent_encodes_takes_the_fast_path_and_decodes_to_the_same_records() -> None:
    records = [Step(5, 1000, 1.7e9, 1.7e9 + 0.1, 0.1, 0.01, 0.05, 0.03, 0.02, 32, 1.25, 4, 1 << 20, False, 1),
               Step(6, 1000, 1.7e9, 1.7e9 + 0.1, 0.1),
               GpuSample(1.7e9, "node-1", 0, "GPU-1", "H100", 5, 93.0, 41.0, 1 << 34, 80 << 30, 512.5, 1e6, 61.0,
                         1980.0, 0)]
    message = wire.encode("node-1:123", 0, 1.7e9, records)
    for kind, values in msgpack.unpackb(message)["r"]:
        assert wire._FAST[kind](values), (kind, values)
    assert wire.decode(message).records == records
