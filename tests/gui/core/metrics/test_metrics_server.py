"""MetricsServer over real sockets: a free port when asked for 0, both exposition formats, a busy port named as such,
and a close that releases the port within its timeout."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.metrics import MetricsError, MetricsServer, is_loopback


def get(url: str, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


def test_serves_prometheus_text_and_openmetrics_on_a_free_port() -> None:
    counters = IngestCounters(messages=3, records=30)
    with MetricsServer(LiveRuns(), lambda: counters, "127.0.0.1", 0) as server:
        assert server.running and server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"
        kind, text = get(server.url)
        assert kind.startswith("text/plain; version=0.0.4")
        assert "ringscope_collector_messages_total 3.0" in text
        kind, text = get(server.url, "application/openmetrics-text; version=1.0.0")
        assert kind.startswith("application/openmetrics-text") and text.endswith("# EOF\n")
        assert "ringscope_collector_messages_total 3.0" in text


def test_a_busy_port_is_named_and_close_releases_the_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(MetricsError, match=f"127.0.0.1:{busy}: the port is in use") as caught:
            MetricsServer(LiveRuns(), None, "127.0.0.1", busy).start()
        assert caught.value.port_in_use
    server = MetricsServer(LiveRuns(), None, "127.0.0.1", 0).start()
    port = server.port
    started = time.monotonic()
    server.close(timeout_s=2.0)
    server.close()  # idempotent
    assert time.monotonic() - started < 3.0 and not server.running
    again = MetricsServer(LiveRuns(), None, "127.0.0.1", port).start()  # the port is free again
    try:
        assert again.port == port
    finally:
        again.close()


def test_an_address_of_another_machine_is_refused_as_such() -> None:
    with pytest.raises(MetricsError, match="not an address of this machine") as caught:
        MetricsServer(LiveRuns(), None, "192.0.2.1", 0).start()  # TEST-NET-1: never assigned to a host
    assert not caught.value.port_in_use


def test_loopback_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("node7.cluster")
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        MetricsServer(LiveRuns(), None, "127.0.0.1", 70000)
