"""Addresses and ports of a launch (``ringscope.gui.core.launch.endpoints``): parsing, free and busy ports, the
collector's address for this machine's processes and for other hosts, loopback."""

from __future__ import annotations

import socket

import pytest

from ringscope.gui.core.launch import LaunchSpec, validate
from ringscope.gui.core.launch.endpoints import (
    check_bindable,
    connect_endpoint,
    free_ports,
    is_loopback_endpoint,
    parse_tcp_endpoint,
    port_in_use,
    remote_endpoint,
)


def test_collector_port_in_use_is_reported() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        endpoint = f"tcp://127.0.0.1:{holder.getsockname()[1]}"
        message = check_bindable(endpoint)
        assert message is not None and "in use" in message and endpoint in message
    assert check_bindable(endpoint) is None  # released: bindable again
    assert "malformed" in (check_bindable("tcp://127.0.0.1:notaport") or "")
    assert any("collector endpoint" in e for e in validate(LaunchSpec(kind="script", trainer=__file__), "udp://x"))


def test_the_collector_is_given_to_other_hosts_by_this_machines_name_when_it_listens_everywhere() -> None:
    assert remote_endpoint("tcp://0.0.0.0:5757") == f"tcp://{socket.getfqdn()}:5757"
    assert remote_endpoint("tcp://*:6000") == f"tcp://{socket.getfqdn()}:6000"
    assert remote_endpoint("tcp://10.1.2.3:5757") is None  # the bound address itself is the one to give


def test_endpoints_parse_or_say_what_a_valid_one_looks_like() -> None:
    assert parse_tcp_endpoint("tcp://node-1:5757") == ("node-1", 5757)
    for bad in ("udp://x:1", "tcp://:5757", "tcp://x:0", "tcp://x:70000", "tcp://x"):
        with pytest.raises(ValueError, match="tcp://HOST:PORT"):
            parse_tcp_endpoint(bad)
    assert connect_endpoint("tcp://*:5757") == connect_endpoint("tcp://0.0.0.0:5757") == "tcp://127.0.0.1:5757"
    assert connect_endpoint("tcp://10.0.0.5:5757") == "tcp://10.0.0.5:5757"


def test_free_ports_are_distinct_and_free_and_loopback_is_recognized() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4 and not any(port_in_use(port) for port in ports)
    assert all(is_loopback_endpoint(f"tcp://{host}:5757") for host in ("127.0.0.1", "[::1]", "localhost"))
    assert not any(is_loopback_endpoint(e) for e in ("tcp://0.0.0.0:5757", "tcp://node7:5757", "not an endpoint"))
