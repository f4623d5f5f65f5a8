"""The metrics HTTP endpoint: ``prometheus_client``'s server over a registry that holds one ``LiveRunsCollector``.

What it owns: the listening socket and its daemon thread (``start`` / ``close``), the bind address rule (loopback
by default; any other address is allowed with a warning, the endpoint has no authentication), and the error a
user sees when the port cannot be used. The exposition (Prometheus text 0.0.4, or OpenMetrics 1.0 when the
scraper asks for it in its Accept header, as Prometheus does) is ``prometheus_client``'s.

Used by ``ringscope record --metrics-port`` and by the window (see ``MetricsServer``). What it must never do:
block its caller (``close`` returns within about its timeout), serve the process-wide default registry, or import
Qt.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import threading
from collections.abc import Callable
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.metrics.collector import LiveRunsCollector, RecorderFigures
from ringscope.gui.core.metrics.families import MetricsLimits

log = logging.getLogger(__name__)

DEFAULT_METRICS_BIND: Final[str] = "127.0.0.1"
"""This machine only: serving the metrics to the network is an explicit choice (``--metrics-bind 0.0.0.0``)."""
SUGGESTED_METRICS_PORT: Final[int] = 9464
"""The port the README's scrape configuration uses (0 picks a free one)."""


class MetricsError(RuntimeError):
    """The endpoint could not start (port in use, unknown address); the message says what to do."""

    def __init__(self, message: str, *, port_in_use: bool = False) -> None:
        super().__init__(message)
        self.port_in_use = port_in_use  # True: the port is the problem, else the address


class MetricsServer:
    """An HTTP endpoint serving the live runs' metrics; ``start()`` it, read ``port`` / ``url``, ``close()`` it.

    Args:
        runs: the live runs to export (an ``IngestSink`` registered with the ingest collector).
        counters_source: returns the ingest collector's counters (``lambda: collector.counters``), or None.
        bind: address to listen on (default loopback only).
        port: TCP port; 0 picks a free one (read it back from ``port`` after ``start``).
        recorder: the session recorder, for its written / dropped counters (None: not exported).
        price_per_gpu_hour: the price to value time at (None or 0: the default price).
        limits: cardinality caps (``MetricsLimits``).
    """

    def __init__(self, runs: LiveRuns, counters_source: Callable[[], IngestCounters] | None = None,
                 bind: str = DEFAULT_METRICS_BIND, port: int = SUGGESTED_METRICS_PORT, *,
                 recorder: RecorderFigures | None = None,
                 price_per_gpu_hour: Callable[[], float | None] | None = None,
                 limits: MetricsLimits | None = None) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be in 0..65535 (0 picks a free one), got {port}")
        self.collector = LiveRunsCollector(runs, counters=counters_source, recorder=recorder,
                                           price_per_gpu_hour=price_per_gpu_hour, limits=limits)
        self._bind = bind
        self._port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # ---- Public API ----------------------------------------------------------------------------------------------

    def start(self) -> MetricsServer:
        """Listen and serve on a daemon thread. Raises ``MetricsError`` when the address or port cannot be used."""
        if self._server is not None:
            return self
        registry = CollectorRegistry(auto_describe=False)  # ours alone: no process-wide default metrics
        registry.register(self.collector)
        try:
            server, thread = start_http_server(self._port, addr=self._bind, registry=registry)
        except OSError as exc:
            raise MetricsError(_bind_error(self._bind, self._port, exc),
                               port_in_use=exc.errno == errno.EADDRINUSE) from None
        self._server, self._thread = server, thread
        self._port = int(server.server_address[1])
        log.info("metrics served on %s", self.url)
        if not is_loopback(self._bind):
            log.warning("metrics on %s are readable without authentication by anyone who can reach this address "
                        "(run names, hosts, costs); bind 127.0.0.1 unless a firewall restricts it", self.url)
        return self

    @property
    def port(self) -> int:
        """The listening port (the real one after ``start``, also when 0 was asked for)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/metrics`` (what a scrape configuration's target points at)."""
        host = f"[{self._bind}]" if ":" in self._bind else self._bind
        return f"http://{host}:{self._port}/metrics"

    @property
    def running(self) -> bool:
        """True between ``start`` and ``close``."""
        return self._server is not None

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop serving and release the port. Idempotent; returns within about ``timeout_s``."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        stopper = threading.Thread(target=server.shutdown, name="ringscope-metrics-stop", daemon=True)
        stopper.start()  # shutdown() waits for the serve loop (it polls every 0.5 s): never wait without a bound
        stopper.join(timeout_s)
        server.server_close()
        if thread is not None:
            thread.join(max(0.0, timeout_s / 2))

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_loopback(bind: str) -> bool:
    """True when ``bind`` is reachable from this machine only (``localhost`` or a loopback address)."""
    if bind.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False  # "", "0.0.0.0"-like wildcards are addresses; a host name may be any interface


def _bind_error(bind: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"cannot serve metrics on {bind}:{port}: the port is in use by another process; choose another "
                "--metrics-port (0 picks a free one)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"cannot serve metrics on {bind}:{port}: {bind} is not an address of this machine; give one of its "
                "addresses (0.0.0.0 listens on every interface, 127.0.0.1 on this machine only)")
    return f"cannot serve metrics on {bind}:{port}: {exc.strerror or exc}; check --metrics-bind and --metrics-port"
