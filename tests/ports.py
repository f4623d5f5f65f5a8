"""Free TCP ports for the tests: one helper, so that no two parts of a test run are ever handed the same port.

Ports come from below Linux's ephemeral range (32768-60999), starting at an offset from the pid, never twice in one
process. A port the kernel hands out for "port 0" is released again before the test binds it, and in that gap any
socket of the processes started together (torchrun's, gloo's, ZeroMQ's) may be given the same one: that made a
clean-clone run fail with EADDRINUSE once. Below the ephemeral range the kernel gives none of ours away.
"""

from __future__ import annotations

import os
import socket

_PORTS = iter(range(20_000 + os.getpid() % 5_000, 32_768))


def free_port() -> int:
    """A port on 127.0.0.1 that nobody holds now and that this process has not handed out before."""
    for port in _PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # someone else's
            return port
    raise RuntimeError("no free port below the ephemeral range left for this test run")
