"""A real ingest sink that keeps what the collector hands it, and a wait helper: shared by the collector, reply-path,
termination and runtime-control tests (``tests/conftest.py``'s ``collector`` fixture runs a collector into one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ringscope.agent import wire
from ringscope.agent.schema import Event, Step
from ringscope.gui.core.ingest.sink import Gap, Rejection


class KeepingSink:
    """Keeps every message (with its receipt time), gap, late join and rejection it is given; safe to read from the
    test's thread while the collector's thread appends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[wire.Batch, float]] = []
        self.gaps: list[Gap] = []
        self.late: list[Gap] = []
        self.rejections: list[Rejection] = []

    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        with self.lock:
            self.batches.append((batch, recv_s))

    def on_gap(self, gap: Gap) -> None:
        with self.lock:
            self.gaps.append(gap)

    def on_joined_late(self, gap: Gap) -> None:
        with self.lock:
            self.late.append(gap)

    def on_rejection(self, rejection: Rejection) -> None:
        with self.lock:
            self.rejections.append(rejection)

    def messages(self) -> list[wire.Batch]:
        """The messages, in the order the collector handed them over."""
        with self.lock:
            return [batch for batch, _ in self.batches]

    def steps(self) -> list[Step]:
        return [r for batch in self.messages() for r in batch.records if isinstance(r, Step)]

    def events(self, kind: str) -> list[Event]:
        return [r for batch in self.messages() for r in batch.records if isinstance(r, Event) and r.event == kind]


def wait_for(condition: Callable[[], object], timeout_s: float = 20.0) -> bool:
    """True once ``condition()`` is true, polling every 20 ms; its last value's truth after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())
