"""Test-wide setup: Qt offscreen, no real collector reached by accident, no writes to the user's settings."""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
import zmq

if TYPE_CHECKING:  # imported in the fixture: the environment below is set before any of Ringscope is imported
    from ringscope.gui.core.ingest.collector import Collector
    from tests.sinks import KeepingSink

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Agents started by tests must never talk to a developer's running app on the default port.
os.environ.setdefault("RINGSCOPE_ENDPOINT", "tcp://127.0.0.1:1")
# QSettings (preferences, recent launches) and default session files go to a throw-away home, in this process
# and in every subprocess a test starts, so tests never read or write the user's real configuration.
_scratch_home = tempfile.mkdtemp(prefix="ringscope-tests-")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_scratch_home, "config")
os.environ["XDG_DATA_HOME"] = os.path.join(_scratch_home, "data")


@pytest.fixture
def push() -> Iterator[Callable[[str], zmq.Socket]]:
    """Connect DEALER sockets to a collector under test (linger 0, a send timeout: a stuck collector fails the test,
    never hangs it); all closed at teardown."""
    context = zmq.Context()
    sockets: list[zmq.Socket] = []

    def connect(endpoint: str) -> zmq.Socket:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 20_000)
        sock.connect(endpoint)
        sockets.append(sock)
        return sock

    yield connect
    for sock in sockets:
        sock.close(0)
    context.term()


@pytest.fixture
def collector() -> Iterator[tuple[Collector, KeepingSink]]:
    """A real collector on a free port handing every message to a ``KeepingSink``; closed at teardown."""
    from ringscope.gui.core.ingest.collector import Collector
    from tests.sinks import KeepingSink

    sink = KeepingSink()
    running = Collector("tcp://127.0.0.1:0", [sink]).start()
    yield running, sink
    running.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Collect garbage after a Qt test, before pytest-qt closes its widgets.

    A widget held only by a reference cycle is destroyed by Python's collector, which runs whenever allocations
    trigger it: during a later test's event processing, or on another thread. Collected here, such leftovers go at
    a fixed point, on the GUI thread, in the test that made them. This does not catch the crash a cycle once caused
    (a Qt child holding its view's bound method segfaulted in ~QBoxLayout only in some teardown orders):
    tests/gui/views/test_qt_gc.py, which requires views to be freed without the collector, does.
    """
    if "qtbot" in getattr(item, "fixturenames", ()):
        gc.collect()
    return (yield)
