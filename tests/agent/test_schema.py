"""The schema's derived tables and the version rule, checked through the real wire format."""

from __future__ import annotations

import dataclasses

import pytest

from ringscope.agent import wire
from ringscope.agent.schema import FIELDS, KINDS, REQUIRED_COUNT, SCHEMA_VERSION, Step


def test_fields_follow_the_dataclasses_in_wire_order() -> None:
    for kind, cls in KINDS.items():
        assert [s.name for s in FIELDS[kind]] == [f.name for f in dataclasses.fields(cls)]
    assert FIELDS["step"][0].name == "rank" and FIELDS["step"][0].sql_type == "INTEGER"
    assert {s.name: s.sql_type for s in FIELDS["step"]}["step_s"] == "REAL"
    assert {s.name: s.sql_type for s in FIELDS["hello"]}["ranks"] == "TEXT"


def _envelope(records: list, version: list[int] | None = None) -> dict:
    return {"v": version or list(SCHEMA_VERSION), "a": "agent-x", "q": 0, "t": 1.0, "r": records}


def test_older_minor_with_fewer_fields_decodes_missing_ones_as_none() -> None:
    required = REQUIRED_COUNT["step"]
    values = [3, 7, 10.0, 10.5, 0.5][:required]
    batch = wire.decode(wire.encode_raw(_envelope([["step", values]], [SCHEMA_VERSION[0], 0])))
    step = batch.records[0]
    assert isinstance(step, Step)
    assert (step.rank, step.step, step.step_s) == (3, 7, 0.5)
    assert step.data_wait_s is None and step.comm_exposed_s is None and step.loss is None


def test_newer_minor_extra_trailing_fields_and_unknown_kinds_are_accepted() -> None:
    full = [3, 7, 10.0, 10.5, 0.5, 0.1, 0.2, 0.3, 0.05, 32, 1.5, 4, 100, False, 2]
    newer = [SCHEMA_VERSION[0], SCHEMA_VERSION[1] + 5]
    batch = wire.decode(wire.encode_raw(_envelope([["step", [*full, "future", 9.9]], ["quantum", [1, 2]]], newer)))
    assert batch.skipped == 1
    assert batch.version == tuple(newer)
    assert len(batch.records) == 1 and batch.records[0].epoch == 2


@pytest.mark.parametrize("major", [SCHEMA_VERSION[0] + 1, SCHEMA_VERSION[0] - 1])
def test_other_major_version_is_rejected_naming_both_versions(major: int) -> None:
    with pytest.raises(wire.WireError) as info:
        wire.decode(wire.encode_raw(_envelope([], [major, 0])))
    assert info.value.reason == "version"
    assert f"{major}.0" in str(info.value) and f"{SCHEMA_VERSION[0]}.x" in str(info.value)


def test_shifted_moves_every_wall_clock_field_of_every_record_kind_and_nothing_else() -> None:
    from ringscope.agent.schema import RECORD_TYPES, WALL_CLOCK_FIELDS, shifted

    for cls in RECORD_TYPES:
        fields = dataclasses.fields(cls)
        # every field a distinct value of its kind; wall-clock fields as floats, so each must move
        values = {f.name: (1_700_000_000.0 + i if f.name in WALL_CLOCK_FIELDS else i) for i, f in enumerate(fields)}
        record = cls(**values)
        moved = shifted(record, 2.5)
        assert moved is not record and type(moved) is cls
        expected = {name: value + 2.5 if name in WALL_CLOCK_FIELDS else value for name, value in values.items()}
        assert dataclasses.asdict(moved) == expected, cls.__name__
        assert dataclasses.asdict(record) == values  # the original (what the recorder writes) is untouched
    untimed = Step(0, 1, None, None, 1.0)  # type: ignore[arg-type]  # no wall-clock value: nothing to copy
    assert shifted(untimed, 1.0) is untimed
