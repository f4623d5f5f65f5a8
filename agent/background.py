"""``BackgroundThread``: the life of the agent's periodic daemon threads (``DeviceSampler``, ``HeartbeatThread``).

One daemon thread running the subclass's ``_run`` until ``close`` sets ``_stop`` (``_run`` waits on it between
rounds, so a close ends the wait at once); ``close`` joins it within a timeout. What a round does, and whether it
waits before or after it, is the subclass's. Stdlib only; never raises out of ``close``.
"""

from __future__ import annotations

import threading
from typing import TypeVar

_Thread = TypeVar("_Thread", bound="BackgroundThread")


class BackgroundThread:
    """A daemon thread named ``name`` that runs ``_run``; ``start`` once, ``close`` any number of times."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self: _Thread) -> _Thread:
        """Start the thread. Returns self."""
        self._thread.start()
        return self

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and wait for it, at most ``timeout_s`` (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        raise NotImplementedError
