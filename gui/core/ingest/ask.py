"""Ask a running collector (the window's ingest process, or ``ringscope record``) to ask its agents something.

Used by ``ringscope stacks`` / ``ringscope control`` and by the window's Run menu: one ZeroMQ DEALER connects to
the collector's endpoint (the same endpoint the agents use, with the same access token under ``--secure``), sends
one control request (``ringscope.agent.control``) and waits for the reply. Nothing here blocks longer than
``timeout_s``; every failure is an ``AskError`` whose text says what to do.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import zmq

from ringscope.agent import control
from ringscope.agent.keys import AgentKeys

REPLY_MARGIN_S: Final[float] = 15.0
"""Beyond the agents' wait: time for the collector to read unanswering local ranks with py-spy (~1 s each)."""


class AskError(RuntimeError):
    """No answer, or a refusal; the message says why in words a user can act on."""


def ask(endpoint: str, command: str, *, run_id: str | None = None, ranks: list[int] | None = None,
        settings: dict[str, Any] | None = None, steps: int | None = None, wait_s: float = 3.0,
        keys: AgentKeys | None = None, timeout_s: float | None = None) -> dict[str, Any]:
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
    try:
        if keys is not None:
            keys.apply(socket)
        socket.connect(endpoint)
        socket.send_multipart(control.encode(command, id=request_id, run=run_id, ranks=ranks, settings=settings,
                                             steps=steps, wait_s=wait_s), zmq.NOBLOCK)
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
        secure = "" if keys is not None else (" If the collector runs with --secure, give this command its "
                                              "access token (RINGSCOPE_KEY or RINGSCOPE_KEY_FILE).")
        raise AskError(f"no answer from a collector at {endpoint} within {timeout:.0f} s: is the window or "
                       f"`ringscope record` running there (--endpoint)?{secure}")
    except zmq.ZMQError as exc:
        raise AskError(f"cannot reach {endpoint}: {exc}") from None
    finally:
        socket.close(0)
        context.term()
