"""Heartbeats: positions written by a training thread, read and sent by the agent's thread, stacks when stuck."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import zmq

from ringscope.agent import runtime, wire
from ringscope.agent.heartbeat import COLLECTIVE, COMPUTE, HeartbeatThread, Position, dump_threads, thread_stacks
from ringscope.agent.schema import Heartbeat


def _blocked_in_a_known_place(position: Position, entered: threading.Event, release: threading.Event) -> None:
    position.enter(COMPUTE, step=50)
    entered.set()
    release.wait(10)  # the "hang": this line must appear in the stack


def test_a_rank_stuck_in_one_phase_gets_its_stack_sent_once_per_episode() -> None:
    position = Position(1)
    sent: list[object] = []
    beats = HeartbeatThread([position], sent.append, stack_after_s=5.0)
    entered, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=_blocked_in_a_known_place, args=(position, entered, release), daemon=True)
    worker.start()
    try:
        assert entered.wait(5)
        since = position.since_s
        [fresh] = beats.beat(now_s=since + 1.0)
        assert (fresh.phase, fresh.step, fresh.stack) == (COMPUTE, 50, None)  # progressing: no stack, no cost
        [stuck] = beats.beat(now_s=since + 6.0)
        assert stuck.stack is not None and "_blocked_in_a_known_place" in stuck.stack
        assert "release.wait(10)" in stuck.stack
        [again] = beats.beat(now_s=since + 7.0)
        assert again.stack is None  # sent once, refreshed only every 10 s of the same episode
        beats.request_stacks()
        [dumped] = beats.beat(now_s=since + 7.5)
        assert dumped.stack is not None  # on demand
        assert sent == [fresh, stuck, again, dumped]
        # what a round walks: only the threads asked for (the stuck ranks'), or every thread without ``only``
        assert set(thread_stacks(only={worker.ident})) == {worker.ident}
        assert {worker.ident, threading.get_ident()} <= set(thread_stacks())
    finally:
        release.set()
        worker.join(5)


def test_an_agent_sends_heartbeats_through_its_publisher() -> None:
    context = zmq.Context()
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    telemetry = runtime.start(framework="pytorch", strategy="ddp", rank=3, world_size=4,
                              endpoint=f"tcp://127.0.0.1:{port}", sample_devices=False)
    try:
        telemetry.position().enter(COLLECTIVE, step=7, bucket=2)
        deadline = time.monotonic() + 10
        beat: Heartbeat | None = None
        while beat is None and time.monotonic() < deadline:
            if pull.poll(200):
                batch = wire.decode(pull.recv_multipart()[-1])
                beat = next((r for r in batch.records if isinstance(r, Heartbeat)), None)
        assert beat is not None
        assert (beat.rank, beat.phase, beat.step, beat.bucket) == (3, COLLECTIVE, 7, 2)
    finally:
        telemetry.close(timeout_s=1.0)
        pull.close(0)
        context.term()


def _loader() -> Iterator[int]:
    yield from range(3)


def _batches(stop: threading.Event) -> Iterator[int]:
    """An epoch loop of generators, as the probe's loader wrapper is: most of the time a generator is running."""
    while not stop.is_set():
        yield from _loader()


def _train(stop: threading.Event) -> None:
    for _ in _batches(stop):
        pass


def test_stacks_taken_while_generators_yield_keep_the_threads_outer_frames() -> None:
    """A walk up ``f_back`` that loses the GIL while a generator on the way yields ends at that generator (seen as a
    training stack that started at the probe's loader, no trainer frame above it). With switches forced every
    microsecond, ~1 in 1 000 of such walks was torn before stacks were taken again. Both ways a stack leaves the
    agent are checked: a dump on demand and a stuck rank's heartbeat."""
    stop = threading.Event()
    worker = threading.Thread(target=_train, args=(stop,), name="trainer")
    position = Position(rank=0)
    beats = HeartbeatThread([position], lambda _: None)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    worker.start()
    position.thread_id = worker.ident
    torn: list[str] = []
    taken = 0
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and taken < 20_000:
            outermost = [thread["frames"][0][2] for thread in dump_threads(worker.ident)
                         if thread["ident"] == worker.ident]
            beats.request_stacks()
            stack = beats.beat()[0].stack
            assert stack is not None
            outermost.append(stack.splitlines()[0].rsplit(" in ", 1)[1])
            taken += len(outermost)
            torn += [name for name in outermost if name != "_bootstrap"]
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        worker.join(10)
    assert taken >= 2_000
    assert torn == [], f"{len(torn)} of {taken} stacks lost their outer frames (outermost: {sorted(set(torn))})"
