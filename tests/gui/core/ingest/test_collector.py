"""The collector over real sockets: many agent processes, gaps, every kind of bad message, sinks that fail."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import msgpack
import pytest

from ringscope.agent import wire
from ringscope.agent.schema import SCHEMA_VERSION, Step
from ringscope.gui.core.ingest.collector import Collector, CollectorError
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from tests.sinks import KeepingSink, wait_for

AGENT_SCRIPT = """
import sys, agent
endpoint, rank, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
telemetry = agent.start(framework="other", strategy="ddp", rank=rank, world_size=3, endpoint=endpoint,
                        run_id="multi", sample_devices=False)
for i in range(steps):
    telemetry.step(rank, i, 100.0 + i, 100.5 + i, data_wait_s=0.01)
telemetry.close(5.0)
"""


class FailingSink(KeepingSink):
    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        raise RuntimeError("this sink always fails")


@pytest.fixture
def collector_and_sink() -> Iterator[tuple[Collector, KeepingSink]]:
    # The failing sink comes first: every test below also shows that its exceptions stop nobody else.
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [FailingSink(), sink]).start()
    yield collector, sink
    collector.close()



def test_several_agent_processes_arrive_completely(collector_and_sink) -> None:
    collector, sink = collector_and_sink
    steps = 2000
    procs = [subprocess.Popen([sys.executable, "-c", AGENT_SCRIPT, collector.endpoint, str(rank), str(steps)],
                              env={**os.environ, "PYTHONPATH": os.getcwd()}) for rank in range(3)]
    try:
        for proc in procs:
            assert proc.wait(60) == 0
        assert wait_for(lambda: len(sink.steps()) >= 3 * steps)
    finally:
        for proc in procs:
            proc.kill()
    by_rank = {r: sorted(s.step for s in sink.steps() if s.rank == r) for r in range(3)}
    assert all(by_rank[r] == list(range(steps)) for r in range(3))
    counters = collector.counters
    assert counters.agents == 3 and counters.gaps == 0 and counters.rejected_total == 0
    assert counters.records == sum(len(b.records) for b, _ in sink.batches)


def _raw(agent_id: str, seq: int, step: int) -> bytes:
    return wire.encode(agent_id, seq, time.time(), [Step(0, step, 1.0, 2.0, 1.0)])


def test_a_skipped_sequence_number_is_a_gap(collector_and_sink, push) -> None:
    collector, sink = collector_and_sink
    sock = push(collector.endpoint)
    for seq in (0, 1, 2, 5, 6):  # 3 and 4 "lost"
        sock.send(_raw("gappy", seq, seq))
    assert wait_for(lambda: len(sink.batches) == 5)
    assert len(sink.gaps) == 1
    gap = sink.gaps[0]
    assert (gap.agent_id, gap.expected_seq, gap.got_seq, gap.missing) == ("gappy", 3, 5, 2)
    counters = collector.counters
    assert (counters.gaps, counters.missing_messages) == (1, 2)


def test_bad_messages_are_rejected_and_counted_while_good_traffic_continues(collector_and_sink, push,
                                                                           tmp_path) -> None:
    collector, sink = collector_and_sink
    recorder = Recorder(tmp_path / "bad.db").start()
    collector.add_sink(recorder)  # added after start
    good, bad = push(collector.endpoint), push(collector.endpoint)
    envelope = {"v": list(SCHEMA_VERSION), "a": "evil", "q": 0, "t": 1.0, "r": [["step", ["x", 1, 1.0, 2.0, 1.0]]]}
    bad_messages = [
        (os.urandom(100), "malformed"),
        (_raw("evil", 0, 1)[:-5], "malformed"),
        (msgpack.packb(envelope), "type"),
        (msgpack.packb({**envelope, "v": [SCHEMA_VERSION[0] + 1, 0]}), "version"),
        (b"\x01" * (wire.MAX_MESSAGE_BYTES + 10), "oversized"),
    ]
    stop = threading.Event()
    sent = []

    def keep_sending() -> None:
        seq = 0
        while not stop.is_set():
            good.send(_raw("good", seq, seq))
            sent.append(seq)
            seq += 1
            time.sleep(0.002)

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        for payload, _ in bad_messages:
            bad.send(payload)
            time.sleep(0.05)
        assert wait_for(lambda: collector.counters.rejected_total == len(bad_messages))
        before = len(sink.steps())
        assert wait_for(lambda: len(sink.steps()) > before + 20)  # still recording after the garbage
    finally:
        stop.set()
        sender.join(5)
    assert wait_for(lambda: len(sink.steps()) == len(sent))
    expected: dict[str, int] = {}
    for _, reason in bad_messages:
        expected[reason] = expected.get(reason, 0) + 1
    assert collector.counters.rejected == expected
    assert sorted(r.reason for r in sink.rejections) == sorted(reason for _, reason in bad_messages)
    assert [s.step for s in sink.steps()] == sent and collector.counters.gaps == 0
    recorder.close()
    recorded = load(recorder.path)
    assert sorted(recorded.steps["step"].astype(int).tolist()) == sent
    assert recorded.counters["rejected"] == expected


def test_binding_a_used_address_is_a_clear_error(collector_and_sink) -> None:
    collector, _ = collector_and_sink
    with pytest.raises(CollectorError, match="address in use"):
        Collector(collector.endpoint).start()


def test_close_is_idempotent_and_bounded() -> None:
    collector = Collector("tcp://127.0.0.1:0").start()
    assert collector.endpoint.startswith("tcp://127.0.0.1:") and not collector.endpoint.endswith(":0")
    started = time.monotonic()
    collector.close()
    collector.close()
    assert time.monotonic() - started < 2.0


class SlowSink(KeepingSink):
    """A real sink that takes its time (a recorder's disk, live runs at many ranks): the collector falls behind."""

    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        time.sleep(0.0005)
        super().on_batch(batch, recv_s)


def test_close_reads_what_is_already_on_its_way_before_it_stops() -> None:
    """Stopping right after the agents sent everything loses nothing still queued in ZeroMQ: ``ringscope record``
    stopped 3 s after 8 192 ranks finished once stored 617 952 of 655 360 rows, with no gap counted (the old close
    kept 1 000 of these 2 000 messages)."""
    import zmq

    sink, peers, messages = SlowSink(), 20, 100
    collector = Collector("tcp://127.0.0.1:0", [sink]).start()
    context = zmq.Context()
    pushes = [context.socket(zmq.DEALER) for _ in range(peers)]
    try:
        for push in pushes:
            push.connect(collector.endpoint)
        time.sleep(0.2)  # connected: nothing waits for the connection itself
        for seq in range(messages):
            for peer, push in enumerate(pushes):
                push.send(wire.encode(f"agent-{peer}", seq, 100.0, [Step(0, seq, 100.0, 100.5, 0.5)]))
        assert wait_for(lambda: len(sink.batches) >= 20)
        # The sink alone needs >= 1 s for the 2 000 batches, more on a loaded machine (a CI run hit the default 2 s
        # bound at 1 645): the bound is not what this test is about, so it is generous here.
        collector.close(drain_s=30.0)
        assert len(sink.batches) == peers * messages and collector.counters.gaps == 0
    finally:
        collector.close()
        for push in pushes:
            push.close(0)
        context.term()
