"""The one declaration of what the window may use of the ingest process: the server answers it and nothing else, the
stand-ins forward it, and a restarted process is given the settings it marks again."""

from __future__ import annotations

from typing import Any

import pytest

from ringscope.gui.core.service.calls import EXPOSED, replay_key
from ringscope.gui.core.service.remote import RemoteMethod, RemoteRecorder, RemoteRuns, _StandIn
from ringscope.gui.core.service.server import IngestService, IngestSetup


class FakeProcess:
    """Records what the stand-ins forward (``IngestProcess.call_quietly``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def call_quietly(self, target: str, name: str, *args: Any) -> Any:
        self.calls.append((target, name, *args))
        return 7.0 if name == "hang_minimum_s" else None


def test_the_server_answers_what_the_table_declares_and_refuses_the_rest() -> None:
    service = IngestService(IngestSetup(bind="tcp://127.0.0.1:0"))  # not started: nothing is bound
    try:
        assert service.call("runs", "lost_timeout_s", (3.0,)) is None
        assert service.runs.lost_timeout_s == 3.0
        assert service.call("runs", "lost_timeout_s", ()) == 3.0
        service.call("runs", "hang_minimum_s", (1.5,))
        assert service.runs.hang_minimum_s == 1.5
        assert service.call("runs", "run_ids", ()) == []
        assert service.call("recorder", "note_launch", ("r", "finished", 0, 1.0)) is None  # kept in memory only
        assert service.call("collector", "counters", ()).messages == 0
        with pytest.raises(ValueError, match=r"no such call: runs\.__init__"):
            service.call("runs", "__init__", ())
        with pytest.raises(KeyError, match="not held"):
            service.call("store", "to_session_data", ("nope",))
    finally:
        service.collector.close()


def test_settings_are_kept_for_a_restarted_process_and_readings_are_not() -> None:
    assert replay_key("runs", "lost_timeout_s", (2.0,)) == ("runs", "lost_timeout_s", None)
    assert replay_key("runs", "lost_timeout_s", ()) is None  # a reading
    assert replay_key("runs", "note_stop_requested", ("a",)) == ("runs", "note_stop_requested", "a")
    assert replay_key("service", "serve_metrics", (9100,)) == ("service", "serve_metrics", None)
    assert replay_key("runs", "hang", ("a",)) is None
    assert replay_key("recorder", "note_event", ("a", None)) is None  # the recording has it already


def test_the_stand_ins_forward_through_the_table() -> None:
    process = FakeProcess()
    runs = RemoteRuns(process, 5.0)  # type: ignore[arg-type]
    runs.lost_timeout_s = 2
    assert runs.lost_timeout_s == 2.0  # kept: read back without asking
    assert runs.hang_minimum_s == 7.0  # asked
    runs.hang_minimum_s = 1.0
    runs.agent_of_rank("r", 3)
    runs.note_stop_requested(None)
    RemoteRecorder(process, None).note_event("a", "e")  # type: ignore[arg-type]
    assert process.calls == [("runs", "lost_timeout_s", 2.0), ("runs", "hang_minimum_s"),
                             ("runs", "hang_minimum_s", 1.0), ("runs", "agent_of_rank", "r", 3),
                             ("runs", "note_stop_requested", None), ("recorder", "note_event", "a", "e")]
    assert {"agent_of_rank", "lost_timeout_s"} <= set(EXPOSED["runs"])


def test_a_stand_in_cannot_forward_what_the_table_does_not_declare() -> None:
    with pytest.raises((RuntimeError, ValueError)):
        class Rogue(_StandIn):
            target = "runs"
            shutdown = RemoteMethod()
