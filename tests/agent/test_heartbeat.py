"""Heartbeats: positions written by a training thread, read and sent by the agent's thread, stacks when stuck."""

from __future__ import annotations

import threading
import time

import zmq

from ringscope.agent import runtime, wire
from ringscope.agent.heartbeat import COLLECTIVE, COMPUTE, HeartbeatThread, Position
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
