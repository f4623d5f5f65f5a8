"""The collector's caps, its joined-late accounting and its plaintext warning, over real sockets."""

from __future__ import annotations

import logging

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.ingest.collector import MAX_FRAME_BYTES, Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.sink import JOINED_LATE
from tests.agent import hostile
from tests.sinks import KeepingSink, wait_for


def _step(agent_id: str, seq: int, rank: int = 0) -> bytes:
    return wire.encode(agent_id, seq, 1.0, [Step(rank, seq, 1.0, 2.0, 1.0)])


def test_caps_on_agents_ranks_and_run_ids_reject_and_count_while_known_agents_go_on(push) -> None:
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink], max_agents=3, max_ranks=6, max_run_ids=2).start()
    try:
        sock = push(collector.endpoint)
        sock.send(wire.encode("a0", 0, 1.0, [hostile.hello("a0", run_id="r0", ranks=[0, 1])]))
        sock.send(wire.encode("a1", 0, 1.0, [hostile.hello("a1", run_id="r1", ranks=[2, 3])]))
        sock.send(wire.encode("a2", 0, 1.0, [hostile.hello("a2", run_id="r2", ranks=[4])]))  # a third run id
        sock.send(wire.encode("a2", 1, 1.0, [hostile.hello("a2", run_id="r1", ranks=list(range(4, 12)))]))
        sock.send(wire.encode("a2", 2, 1.0, [hostile.hello("a2", run_id="r1", ranks=[4, 5])]))
        sock.send(_step("a3", 0, rank=0))  # a fourth agent
        sock.send(_step("a0", 1, rank=1))
        sock.send(_step("a2", 3, rank=6))  # a seventh rank
        sock.send(_step("a2", 4, rank=5))
        assert wait_for(lambda: len(sink.batches) + len(sink.rejections) == 9)
    finally:
        collector.close()
    assert [b.agent_id for b in sink.messages()] == ["a0", "a1", "a2", "a0", "a2"]
    assert collector.counters.rejected == {"too_many_runs": 1, "too_many_ranks": 2, "too_many_agents": 1}
    texts = {r.reason: r.detail for r in sink.rejections}
    assert "at most 3" in texts["too_many_agents"] and "new session" in texts["too_many_agents"]
    assert "at most 2" in texts["too_many_runs"] and "at most 6" in texts["too_many_ranks"]
    assert collector.counters.agents == 3
    assert collector.counters.gaps == 0  # a refused message is counted once, as rejected, not also as a gap


def test_an_agents_first_message_after_seq_0_is_a_joined_late_range_not_a_gap(push, tmp_path) -> None:
    sink = KeepingSink()
    recorder = Recorder(tmp_path / "late.db").start()
    collector = Collector("tcp://127.0.0.1:0", [sink, recorder]).start()
    try:
        sock = push(collector.endpoint)
        for seq in (7, 8, 10):
            sock.send(_step("late", seq))
        for seq in (0, 1):
            sock.send(_step("punctual", seq))
        assert wait_for(lambda: len(sink.batches) == 5)
    finally:
        collector.close()
        recorder.close()
    assert [(g.agent_id, g.expected_seq, g.got_seq, g.kind) for g in sink.late] == [("late", 0, 7, JOINED_LATE)]
    assert [(g.agent_id, g.expected_seq, g.got_seq) for g in sink.gaps] == [("late", 9, 10)]
    counters = collector.counters
    assert (counters.gaps, counters.missing_messages, counters.joined_late, counters.missing_before_join) == \
        (1, 1, 1, 7)
    summary = summarize(recorder.path)
    assert summary["joined_late"] == [{"agent_id": "late", "messages_not_seen": 7, "first_seq_seen": 7}]
    assert (summary["gaps"], summary["missing_messages"]) == (1, 1)


def test_huge_claimed_gaps_are_counted_and_the_file_still_reads(push, tmp_path) -> None:
    recorder = Recorder(tmp_path / "huge.db").start()
    collector = Collector("tcp://127.0.0.1:0", [recorder]).start()
    try:
        sock = push(collector.endpoint)
        for agent_id in ("h1", "h2"):  # two gaps near 2^63: their sum would overflow SQLite's SUM
            sock.send(_step(agent_id, 0))
            sock.send(_step(agent_id, 2**63 - 1))
        sock.send(_step("h3", 2**63 - 1))  # and a joined-late range as large
        assert wait_for(lambda: collector.counters.messages == 5)
    finally:
        collector.close()
        recorder.close()
    summary = summarize(recorder.path)
    assert summary["gaps"] == 2 and summary["missing_messages"] >= 2 * (2**63 - 3)
    assert summary["joined_late"][0]["messages_not_seen"] == 2**63 - 1


def test_a_frame_beyond_zeromqs_limit_costs_that_connection_only(push) -> None:
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink]).start()
    try:
        rogue = push(collector.endpoint)
        rogue.send(b"\x00" * (MAX_FRAME_BYTES + 1))  # ZeroMQ drops it and the connection
        rogue.send(b"\x00" * (wire.MAX_MESSAGE_BYTES + 1))  # rejected as oversized once it reconnects... or not
        good = push(collector.endpoint)
        for seq in range(20):
            good.send(_step("good", seq))
        assert wait_for(lambda: len(sink.batches) == 20)
    finally:
        collector.close()
    assert [b.seq for b in sink.messages()] == list(range(20))
    assert set(collector.counters.rejected) <= {"oversized"}


def test_a_plaintext_bind_beyond_loopback_warns_once(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="ringscope.gui.core.ingest.collector"):
        Collector("tcp://127.0.0.1:0").start().close()
        assert not [r for r in caplog.records if "anyone" in r.getMessage()]
        Collector("tcp://0.0.0.0:0").start().close()
    warnings = [r.getMessage() for r in caplog.records if "anyone" in r.getMessage()]
    assert len(warnings) == 1 and "--secure" in warnings[0]
