"""Fixtures for trainer tests: a real ZeroMQ ROUTER receiver that decodes every message with ``ringscope.agent.wire``.

``receiver_factory()`` binds a new ROUTER socket on a random 127.0.0.1 port (linger=0) and drains it on a daemon
thread into ``receiver.records``; give its ``endpoint`` to the trainer as ``RINGSCOPE_ENDPOINT``. The factory is
module-scoped so that module-scoped fixtures running a training once can share it with many tests; every receiver
it made is closed (thread joined, socket closed, context terminated) at the end of the module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import zmq

from ringscope.agent import wire
from ringscope.agent.schema import Event, Hello, Record, Step


class TelemetryReceiver:
    """One bound ROUTER socket and the records decoded from it (in arrival order)."""

    def __init__(self) -> None:
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.records: list[Record] = []
        self.rejected: list[wire.WireError] = []
        self.messages = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="test-receiver", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            if not self._socket.poll(50):
                continue
            data = self._socket.recv_multipart(zmq.NOBLOCK)[-1]
            self.messages += 1
            try:
                self.records.extend(wire.decode(data).records)
            except wire.WireError as exc:
                self.rejected.append(exc)

    # ---- Queries -------------------------------------------------------------------------------------------------

    def steps(self, rank: int | None = None) -> list[Step]:
        """Step records (of one rank), in arrival order."""
        return [r for r in self.records if isinstance(r, Step) and (rank is None or r.rank == rank)]

    def events(self, kind: str | None = None) -> list[Event]:
        """Event records (of one kind)."""
        return [r for r in self.records if isinstance(r, Event) and (kind is None or r.event == kind)]

    def hellos(self) -> list[Hello]:
        """Identity records (re-sent periodically, so several per agent)."""
        return [r for r in self.records if isinstance(r, Hello)]

    def wait_for(self, predicate: Callable[[TelemetryReceiver], bool], timeout_s: float = 10.0) -> bool:
        """Poll ``predicate(self)`` until it is true or ``timeout_s`` passes; returns the last result."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.05)
        return predicate(self)

    def close(self) -> None:
        """Stop draining and release the socket (never hangs: linger=0, join with a timeout)."""
        self._stop.set()
        self._thread.join(2.0)
        self._socket.close(linger=0)
        self._context.term()


@pytest.fixture(scope="module")
def receiver_factory() -> Iterator[Callable[[], TelemetryReceiver]]:
    """Make ``TelemetryReceiver``s; all are closed when the test module ends."""
    made: list[TelemetryReceiver] = []

    def make() -> TelemetryReceiver:
        receiver = TelemetryReceiver()
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()
