"""Addresses and ports of a launch: parsing ``tcp://HOST:PORT``, free local ports, whether a collector could bind an
endpoint now, the address this machine's processes (``connect_endpoint``) and other hosts' (``remote_endpoint``)
reach a collector at, and whether an endpoint is loopback only.

It never imports Qt or a training framework; the only network it touches is binding a local socket for a moment
(``free_ports``, ``port_in_use``) and this machine's own name.
"""

from __future__ import annotations

import ipaddress
import socket
from contextlib import ExitStack
from typing import Final

_LOOPBACK_NAMES: Final[frozenset[str]] = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (all held open together so none repeats)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``host:port`` cannot be bound right now (someone else holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def parse_tcp_endpoint(endpoint: str) -> tuple[str, int]:
    """``tcp://host:port`` -> (host, port). Raises ValueError saying what a valid endpoint looks like."""
    if not endpoint.startswith("tcp://"):
        raise ValueError(f"endpoint {endpoint!r} is not a tcp endpoint; expected tcp://HOST:PORT")
    host, sep, port_text = endpoint[len("tcp://"):].rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is malformed; expected tcp://HOST:PORT with a port in 1..65535")
    return host, int(port_text)


def check_bindable(endpoint: str) -> str | None:
    """None when a collector could bind ``endpoint`` now, else a message (malformed, or port in use)."""
    try:
        host, port = parse_tcp_endpoint(endpoint)
    except ValueError as error:
        return str(error)
    bind_host = "0.0.0.0" if host in ("*", "0.0.0.0") else host
    try:
        in_use = port_in_use(port, bind_host)
    except OSError as error:  # e.g. a host name that does not resolve
        return f"cannot bind collector endpoint {endpoint}: {error}"
    if in_use:
        return (f"collector endpoint {endpoint}: port {port} is in use by another process "
                "(another Ringscope window?); close it or choose another port with --bind")
    return None


def connect_endpoint(bind_endpoint: str) -> str:
    """The address local processes connect to for a collector bound at ``bind_endpoint`` (``*`` -> 127.0.0.1)."""
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if bind_endpoint.startswith(wildcard):
            return "tcp://127.0.0.1:" + bind_endpoint[len(wildcard):]
    return bind_endpoint


def remote_endpoint(bind_endpoint: str) -> str | None:
    """The address other hosts connect to for a collector bound at ``bind_endpoint``: this machine's name when it
    listens on every interface; None when the bound address itself is the one to give (or it is loopback only,
    which validation refuses for runs on hosts)."""
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if bind_endpoint.startswith(wildcard):
            return f"tcp://{socket.getfqdn()}:{bind_endpoint[len(wildcard):]}"
    return None


def is_loopback_endpoint(endpoint: str) -> bool:
    """True when ``endpoint`` names this machine's loopback (127.x, ::1, localhost): no other host can reach it."""
    try:
        host, _ = parse_tcp_endpoint(endpoint)
    except ValueError:
        return False
    host = host.strip("[]")
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
