"""Setting up the collector's socket (``ringscope.gui.core.ingest.socket_setup``): which bind addresses only this
machine reaches, and the open-file limit raised for many agents (a hard limit too low is reported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ringscope.gui.core.ingest.socket_setup import is_local_endpoint, zmq_endpoint


@pytest.mark.parametrize(("bind", "local"), [
    ("tcp://127.0.0.1:5757", True), ("tcp://127.3.4.5:1", True), ("tcp://localhost:5757", True),
    ("tcp://[::1]:5757", True), ("ipc:///tmp/ringscope", True), ("inproc://x", True),
    ("tcp://0.0.0.0:5757", False), ("tcp://*:5757", False), ("tcp://10.0.0.7:5757", False),
    ("tcp://eth0:5757", False), ("tcp://[::]:5757", False), ("tcp://example.org:5757", False),
])
def test_which_endpoints_count_as_local(bind: str, local: bool) -> None:
    assert is_local_endpoint(bind) is local


def test_port_0_is_any_free_port() -> None:
    assert zmq_endpoint("tcp://127.0.0.1:0") == "tcp://127.0.0.1:*"
    assert zmq_endpoint("tcp://127.0.0.1:5757") == "tcp://127.0.0.1:5757"


def test_open_file_limit_is_raised_and_a_low_hard_limit_is_reported() -> None:
    code = (
        "import logging, resource\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from ringscope.gui.core.ingest.socket_setup import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "print(raise_open_file_limit(4096), flush=True)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 300))\n"
        "print(raise_open_file_limit(4096), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    first, second = (int(v) for v in out.stdout.split())
    assert first >= 4096 or first == resource_hard_limit()
    assert second == 300
    assert "open-file limit is 300" in out.stderr and "ulimit -n 4096" in out.stderr


def resource_hard_limit() -> int:
    import resource

    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[1])
