"""The publisher's bounds over real sockets: Hello/Health never grow its queue, batches too large for one message are
split, and connections that drop are counted in Health."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from ringscope.agent import wire
from ringscope.agent.publisher import Publisher
from ringscope.agent.schema import MAX_TEXT_CHARS, Event, Health, Hello, Step
from tests.agent import hostile
from tests.ports import free_port


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.term()


def _pull(context: zmq.Context, port: int) -> zmq.Socket:
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    pull.bind(f"tcp://127.0.0.1:{port}")
    return pull


def _receive(pull: zmq.Socket, until, timeout_s: float = 10.0) -> list[wire.Batch]:
    batches: list[wire.Batch] = []
    deadline = time.monotonic() + timeout_s
    while not until(batches) and time.monotonic() < deadline:
        if pull.poll(50):
            batches.append(wire.decode(pull.recv_multipart()[-1]))
    return batches


def test_hello_and_health_never_grow_the_queue_beyond_its_capacity(context: zmq.Context) -> None:
    port = free_port()
    identity = hostile.hello("bounded")
    publisher = Publisher(f"tcp://127.0.0.1:{port}", "bounded", hello=lambda: identity, queue_capacity=1000,
                          flush_interval_s=0.005, hello_interval_s=0.01, health_interval_s=0.01).start()
    pull = None
    try:
        for i in range(1000):
            publisher.put(Step(0, i, 1.0, 2.0, 1.0))
        most = 0
        deadline = time.monotonic() + 1.5  # ~150 Hello and Health records made while nobody listens
        while time.monotonic() < deadline:
            most = max(most, publisher.stats.queue_len)
            time.sleep(0.005)
        assert most == 1000 and publisher.stats.dropped_records == 0
        pull = _pull(context, port)
        batches = _receive(pull, lambda got: sum(isinstance(r, Step) for b in got for r in b.records) >= 1000)
    finally:
        publisher.close()
        if pull is not None:
            pull.close(0)
    records = [r for b in batches for r in b.records]
    assert isinstance(records[0], Hello)  # identity first, so a new collector knows who speaks
    assert [r.step for r in records if isinstance(r, Step)] == list(range(1000))
    assert [b.seq for b in batches] == list(range(len(batches)))


def test_a_batch_too_large_for_one_message_is_split_not_rejected(context: zmq.Context) -> None:
    port = free_port()
    pull = _pull(context, port)
    publisher = Publisher(f"tcp://127.0.0.1:{port}", "big", batch_max=512, flush_interval_s=0.2).start()
    try:
        text = "x" * (MAX_TEXT_CHARS - 10)
        for i in range(400):  # 400 x 16 KB = 6.5 MB in one flush: more than one message may hold
            publisher.put(Event(1.0, "warning", step=i, text=text))
        batches = _receive(pull, lambda got: sum(len(b.records) for b in got) >= 400)
    finally:
        publisher.close()
        pull.close(0)
    assert len(batches) >= 2 and all(b.size_bytes <= wire.MAX_MESSAGE_BYTES for b in batches)
    assert [r.step for b in batches for r in b.records if isinstance(r, Event)] == list(range(400))
    assert [b.seq for b in batches] == list(range(len(batches))) and publisher.stats.dropped_records == 0


def test_a_dropped_connection_is_counted_in_health_and_unacknowledged_messages_go_again(
        context: zmq.Context) -> None:
    port = free_port()
    first = _pull(context, port)
    publisher = Publisher(f"tcp://127.0.0.1:{port}", "flaky", flush_interval_s=0.01, health_interval_s=0.05).start()
    second = None
    try:
        publisher.put(Step(0, 0, 1.0, 2.0, 1.0))
        assert _receive(first, lambda got: any(isinstance(r, Step) for b in got for r in b.records))
        first.close(0)  # the collector goes away
        deadline = time.monotonic() + 10
        while publisher.stats.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        second = _pull(context, port)  # and a new one listens on the same port
        publisher.put(Step(0, 1, 1.0, 2.0, 1.0))
        batches = _receive(second, lambda got: any(isinstance(r, Health) and r.disconnects for b in got
                                                   for r in b.records))
    finally:
        publisher.close()
        if second is not None:
            second.close(0)
    healths = [r for b in batches for r in b.records if isinstance(r, Health)]
    assert healths and healths[-1].disconnects == 1
    # this receiver never acknowledges: everything goes again, in order, before what is new
    seqs = [b.seq for b in batches]
    assert seqs[0] == 0 and seqs == list(range(len(seqs)))
    assert publisher.stats.resent_batches >= 1


def test_batch_max_beyond_the_message_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_max"):
        Publisher("tcp://127.0.0.1:1", "x", batch_max=wire.MAX_RECORDS_PER_MESSAGE)


def test_what_waits_for_an_ack_stays_within_its_bounds_when_the_collector_never_acknowledges(
        context: zmq.Context) -> None:
    from ringscope.agent.publisher import UNACKED_MAX_BYTES

    port = free_port()
    pull = _pull(context, port)  # receives everything, acknowledges nothing
    publisher = Publisher(f"tcp://127.0.0.1:{port}", "unacked", flush_interval_s=0.01).start()
    text = "x" * (MAX_TEXT_CHARS - 10)
    try:
        for i in range(900):  # ~14 MB sent: more than the unacknowledged messages may hold
            publisher.put(Event(1.0, "warning", step=i, text=text))
        got = _receive(pull, lambda batches: sum(len(b.records) for b in batches) >= 900)
        stats = publisher.stats
    finally:
        publisher.close()
        pull.close(0)
    assert sum(len(b.records) for b in got) >= 900 and stats.dropped_records == 0
    assert 0 < stats.unacked_bytes <= UNACKED_MAX_BYTES and stats.unacked_expired > 0
    assert stats.acked_seq == -1
