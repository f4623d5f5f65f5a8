"""Ask a running collector (the window's ingest process, or ``ringscope record``) to ask its agents something.

Used by ``ringscope stacks`` / ``ringscope control`` and by the window's Run menu: one ZeroMQ DEALER connects to
the collector's endpoint (the same endpoint the agents use, with the same access token under ``--secure``), sends
one control request (``ringscope.agent.control``) and waits for the reply. Nothing here blocks longer than
``timeout_s``; every failure is an ``AskError`` whose text says what to do.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Final

import zmq

from ringscope.agent import control
from ringscope.agent.keys import AgentKeys

REPLY_MARGIN_S: Final[float] = 15.0
"""Beyond the agents' wait: time for the collector to read unanswering local ranks with py-spy (~1 s each)."""
CONNECT_S: Final[float] = 3.0
"""How long a connection (and its CURVE handshake) may take before the collector is declared unreachable."""
_HANDSHAKE_FAILED: Final[int] = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                 | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


class AskError(RuntimeError):
    """No answer, or a refusal; the message says why in words a user can act on."""


def ask(endpoint: str, command: str, *, run_id: str | None = None, ranks: list[int] | None = None,
        settings: dict[str, Any] | None = None, steps: int | None = None, wait_s: float = 3.0,
        keys: AgentKeys | None = None, timeout_s: float | None = None,
        attempt: control.AttemptNote | None = None) -> dict[str, Any]:
    """Send one request and return the collector's ``result`` map (see ``ringscope.gui.core.ingest.requests``).

    Raises ``AskError`` when nothing answers within ``timeout_s`` (default ``wait_s`` + ``REPLY_MARGIN_S``) or the
    collector refuses the request (unknown run, bad settings...).
    """
    if settings is not None:
        try:
            settings = control.check_settings(settings)
        except control.ControlError as exc:
            raise AskError(exc.detail) from None
    timeout = wait_s + REPLY_MARGIN_S if timeout_s is None else timeout_s
    request_id = uuid.uuid4().hex[:16]
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    monitor = socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | _HANDSHAKE_FAILED)
    secure = "" if keys is not None else (" If the collector runs with --secure, give this command its "
                                          "access token (RINGSCOPE_KEY or RINGSCOPE_KEY_FILE).")
    try:
        if keys is not None:
            keys.apply(socket)
        socket.connect(endpoint)
        _connected(monitor, endpoint, secure)
        socket.send_multipart(control.encode(command, id=request_id, run=run_id, ranks=ranks, settings=settings,
                                             steps=steps, wait_s=wait_s,
                                             attempt=attempt.to_body() if attempt is not None else None),
                             zmq.NOBLOCK)
        deadline_ms = int(timeout * 1000)
        while socket.poll(deadline_ms, zmq.POLLIN):
            try:
                reply = control.decode(socket.recv_multipart(), limit=None)
            except control.ControlError:
                continue
            if reply.command == control.REPLY and reply.request_id in (request_id, ""):
                if not reply.ok:
                    raise AskError(reply.error or "the collector refused the request")
                return reply.result
        raise AskError(f"no answer from the collector at {endpoint} within {timeout:.0f} s")
    except zmq.ZMQError as exc:
        raise AskError(f"cannot reach {endpoint}: {exc}") from None
    finally:
        socket.disable_monitor()
        monitor.close(0)
        socket.close(0)
        context.term()


def _connected(monitor: zmq.Socket, endpoint: str, secure: str) -> None:
    """Wait for the connection's handshake; AskError when it fails or nothing answers within ``CONNECT_S``."""
    from zmq.utils.monitor import recv_monitor_message

    deadline = time.monotonic() + CONNECT_S
    while (left := deadline - time.monotonic()) > 0:
        if not monitor.poll(int(left * 1000) + 1):
            break
        event = recv_monitor_message(monitor)["event"]
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            return
        if event & _HANDSHAKE_FAILED:
            raise AskError(f"the collector at {endpoint} refused this connection's handshake: a wrong or missing "
                           f"access token, or a collector started without --secure given one.{secure}")
    raise AskError(f"nothing answers at {endpoint}: is the window or 'ringscope record' running there "
                   f"(--endpoint)?{secure}")
