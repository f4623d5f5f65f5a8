"""Setting up the collector's ROUTER socket: the address it binds, the open-file limit its agents need, and CURVE.

What it owns: how a bind address is read (``tcp://host:0`` is any free port; which addresses only this machine can
reach), raising the soft open-file limit towards what many agents need (one connection each), making a socket a
CURVE server that admits one client key (a ZAP handler thread), and releasing a socket with its monitor and
handler.

What it must never do: import Qt, or fail silently: a limit that cannot be raised is logged with what to do.
"""

from __future__ import annotations

import ipaddress
import logging
import resource

import zmq
from zmq.auth.thread import ThreadAuthenticator

from ringscope.agent.keys import CollectorKeys

log = logging.getLogger(__name__)


def raise_open_file_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (each agent holds one connection). Returns the new limit.

    Warns when the hard limit is lower: with too few descriptors ZeroMQ silently refuses agents
    (shared ENVIRONMENT.md: a third of 1024 ranks never arrived with ``ulimit -n 512``).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d (%s)", soft, target, exc)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "open-file limit is %d (hard limit %s): the collector can serve only about %d agents; "
            "raise it (ulimit -n %d) before monitoring large trainings", soft, hard, soft // 2, wanted)
    return int(soft)


def is_local_endpoint(bind: str) -> bool:
    """True when ``bind`` is reachable from this machine only: ipc/inproc, or TCP on a loopback address."""
    if not bind.startswith("tcp://"):
        return True  # ipc:// and inproc:// are local by construction
    host = bind[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", an interface name or a host name: possibly every network this machine is on


def zmq_endpoint(bind: str) -> str:
    """``tcp://host:0`` means any free port; ZeroMQ spells that ``tcp://host:*``."""
    if bind.startswith("tcp://") and bind.endswith(":0"):
        return bind[:-2] + ":*"
    return bind


def secure(context: zmq.Context, socket: zmq.Socket, keys: CollectorKeys) -> ThreadAuthenticator:
    """Make ``socket`` a CURVE server that admits only ``keys.client_public`` (checked by a ZAP handler, returned:
    ``release`` stops it)."""
    allowed = keys.client_public.encode()

    class _AllowList:
        def callback(self, domain: str, client_key: bytes) -> bool:
            return client_key == allowed

    authenticator = ThreadAuthenticator(context, log=logging.getLogger("ringscope.gui.core.ingest.collector.zap"))
    authenticator.start()
    authenticator.configure_curve_callback("*", credentials_provider=_AllowList())
    keys.apply(socket)
    return authenticator


def release(context: zmq.Context, socket: zmq.Socket | None, monitor: zmq.Socket | None,
            authenticator: ThreadAuthenticator | None) -> None:
    """Close the socket and its handshake monitor, stop the ZAP handler, end the context."""
    if monitor is not None:
        monitor.close(0)
    if socket is not None:
        if monitor is not None:
            socket.disable_monitor()
        socket.close(0)
    if authenticator is not None:
        authenticator.stop()
    context.term()
