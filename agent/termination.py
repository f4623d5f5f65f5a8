"""Send what the agents hold when their process is told to stop (SIGTERM), even while the training is blocked.

torchrun, Slurm and Kubernetes stop a training's processes with SIGTERM. Its default action ends the process at
once, and what the agent had not sent yet (one flush interval of steps, more on a loaded machine) was lost: in the
very runs a user opens to see what went wrong (a rank died, torchrun tore the others down).

How: a Python-level SIGTERM handler runs only on the main thread, between two bytecodes, and a rank blocked in a
collective whose peer is gone may never get there. But CPython's C-level handler also writes the signal's number to
the wakeup fd at once. A watcher thread reads it, has every agent of the process flush (at most ``FLUSH_S``) and
ends the process with SIGTERM's default action, so its exit status is the one it would have had (torchrun reports
``-15`` either way). The main-thread handler does the same when it gets there first.

What it must never do: take over a SIGTERM handler the program installed (only the default is replaced; a handler
installed later wins, and the watcher then leaves the signal to it), take over a wakeup fd someone else set
(asyncio: then only the main-thread handler flushes), act in a forked child (data-loader workers inherit the
handler and the fd: the child's fd is pointed at /dev/null and its handler restores the default), or delay the end
by more than ``FLUSH_S`` (plus the watcher's wake-up). ``RINGSCOPE_SIGTERM_FLUSH=0`` leaves SIGTERM alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger(__name__)

FLUSH_S: Final[float] = 1.0
"""The longest a SIGTERM'd process waits for its agents to hand over what they hold (torchrun waits 30 s before
SIGKILL; Slurm's KillWait is 30 s by default)."""
ENV_SWITCH: Final[str] = "RINGSCOPE_SIGTERM_FLUSH"

Flush = Callable[[float], object]
"""Called with the seconds it may take: send what is held and stop (``Agent._terminated``)."""

_lock = threading.RLock()  # re-entrant: the main-thread handler may interrupt a register() that holds it
_flushes: dict[int, Flush] = {}  # id(owner) -> flush, in registration order
_installed_pid: int | None = None  # the process whose handler and watcher these are
_wakeup: tuple[socket.socket, socket.socket] | None = None  # (read end, write end) of the wakeup fd, if ours
_ending = threading.Lock()  # held by whoever ends the process (the watcher or the main-thread handler)


def register(owner: object, flush: Flush) -> bool:
    """Flush ``owner`` when the process gets SIGTERM; installs the handler at the first call on the main thread.
    False when SIGTERM is not watched (switched off, another handler, or not called on the main thread first)."""
    with _lock:
        if not _install():
            return False
        _flushes[id(owner)] = flush
        return True


def unregister(owner: object) -> None:
    """``owner`` flushed itself (closed): nothing to do for it at SIGTERM."""
    with _lock:
        _flushes.pop(id(owner), None)


def watching() -> bool:
    """True when this process's SIGTERM flushes the registered agents."""
    return _installed_pid == os.getpid() and signal.getsignal(signal.SIGTERM) is _on_sigterm


def _install() -> bool:
    global _installed_pid, _wakeup
    if _installed_pid == os.getpid():
        return True
    if os.environ.get(ENV_SWITCH, "").strip().lower() in {"0", "false", "no", "off"}:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False  # signal.signal is the main thread's only
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False  # the program (or a framework) handles SIGTERM itself: it decides what happens
    read_end, write_end = socket.socketpair()
    write_end.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(write_end.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError) as exc:
        log.debug("ringscope: no wakeup fd (%s); SIGTERM is flushed when the main thread runs", exc)
        previous = -2
    if previous != -1:  # someone else's (asyncio): theirs stays, the main-thread handler alone flushes
        if previous >= 0:
            signal.set_wakeup_fd(previous)
        read_end.close()
        write_end.close()
    else:
        _wakeup = (read_end, write_end)
        threading.Thread(target=_watch, args=(read_end,), name="ringscope-sigterm", daemon=True).start()
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed_pid = os.getpid()
    return True


def _watch(read_end: socket.socket) -> None:
    """The watcher thread: the wakeup fd gets a byte per signal handled in Python (SIGINT's too)."""
    while True:
        try:
            data = read_end.recv(256)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _end(on_main_thread=False)


def _on_sigterm(signum: int, frame: Any) -> None:
    """The Python-level handler (main thread)."""
    if _installed_pid != os.getpid():  # a forked child that could not restore the default: die as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _end(on_main_thread=True)


def _end(*, on_main_thread: bool) -> None:
    """Flush every registered agent within ``FLUSH_S``, then die of SIGTERM's default action."""
    if _ending.acquire(timeout=FLUSH_S + 1.0):  # the other path may be flushing: it ends the process
        deadline = time.monotonic() + FLUSH_S
        with _lock:
            flushes = list(_flushes.values())
            _flushes.clear()
        # side by side: each may wait for its socket to hand over what it holds (ZeroMQ's linger), and one slow
        # agent must not leave the others of the process (a simulator's, a MirroredStrategy worker's) no time
        threads = [threading.Thread(target=_flush, args=(flush, FLUSH_S), name="ringscope-sigterm-flush",
                                    daemon=True) for flush in flushes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    _die(on_main_thread)


def _flush(flush: Flush, seconds: float) -> None:
    try:
        flush(seconds)
    except Exception:  # the process is ending anyway: it must end
        log.exception("ringscope: flushing telemetry at SIGTERM failed")


def _die(on_main_thread: bool) -> None:
    if on_main_thread:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:  # signal.signal is the main thread's only; the C library's is not (Linux, macOS)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
            if libc.signal(int(signal.SIGTERM), None) == ctypes.c_void_p(-1).value:  # SIG_ERR
                raise OSError(ctypes.get_errno(), "signal()")
        except (OSError, AttributeError) as exc:
            log.debug("ringscope: cannot restore SIGTERM's default (%s); exiting with its status", exc)
            os._exit(128 + int(signal.SIGTERM))
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(FLUSH_S)  # the signal is delivered on return to user space; never return into the handler's caller
    os._exit(128 + int(signal.SIGTERM))


_fork_mask: set[int | signal.Signals] | None = None  # the forking thread's signal mask before ``_before_fork``


def _before_fork() -> None:
    """SIGTERM waits while the process forks: a child's C-level handler that ran before ``_after_fork_in_child``
    would write into the shared wakeup socket, and the parent's watcher would end the parent."""
    global _fork_mask
    if _installed_pid == os.getpid():
        _fork_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _after_fork_in_parent() -> None:
    global _fork_mask
    if _fork_mask is not None:
        mask, _fork_mask = _fork_mask, None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _after_fork_in_child() -> None:
    """A forked child (data-loader worker) inherits the handler and the wakeup fd, not the watcher or the agents:
    its SIGTERM must neither write into the parent's watcher nor flush anything. A SIGTERM that came during the
    fork is delivered when the mask is restored at the end, to the default action."""
    global _installed_pid, _fork_mask
    if _installed_pid is None:
        return
    try:
        _forget_in_child()
    finally:
        if _fork_mask is not None:
            mask, _fork_mask = _fork_mask, None
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forget_in_child() -> None:
    global _installed_pid
    _installed_pid = None
    _flushes.clear()
    if _wakeup is not None:
        with contextlib.suppress(OSError):  # writes to the shared socket would wake the parent's watcher
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, _wakeup[1].fileno())
            os.close(devnull)
    with contextlib.suppress(ValueError, OSError):  # only from the child's main thread
        signal.set_wakeup_fd(-1)
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
