"""The injection's safety switch: one per process, shared with the start-up bootstrap.

Every patched function asks ``active()`` first and calls the original when the injection is off. ``off(reason)``
turns it off for the rest of the process and says so once on stderr, in one line; the bootstrap uses the same flag
(an attribute of ``sys``, because the bootstrap must not import ``agent``), so a process never prints two such lines.
``fault(stage)`` raises when ``RINGSCOPE_INJECT_FAULT`` names that stage: tests use it to break the injection on
purpose and check that the training does not notice. Nothing here imports a framework or raises from ``off``.
"""

from __future__ import annotations

import os
import sys

from ringscope.agent.inject.environment import ENV_INJECT_FAULT

_OFF_FLAG = "_ringscope_zero_code_off"  # the bootstrap's name for the same flag
_UNMEASURED_FLAG = "_ringscope_unmeasured"  # what ``unmeasured`` has already said, on ``sys`` like the flag above


def active() -> bool:
    """True until the injection was turned off in this process."""
    return not getattr(sys, _OFF_FLAG, False)


def off(reason: str) -> None:
    """Turn the injection off for this process; the first call prints ``reason`` on stderr (never raises)."""
    try:
        if getattr(sys, _OFF_FLAG, False):
            return
        setattr(sys, _OFF_FLAG, True)
        sys.stderr.write(f"ringscope: zero-code instrumentation is off in this process ({reason}); "
                         "the program runs without it\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not stop the training
        pass


def unmeasured(what: str, reason: str) -> None:
    """Say once per process and ``what`` that something is not measured while the rest of the injection stays on
    (``ringscope: <what> not measured in this process (<reason>); the program runs unchanged``). Never raises."""
    try:
        said: set[str] = getattr(sys, _UNMEASURED_FLAG, set())
        if what in said:
            return
        said.add(what)
        setattr(sys, _UNMEASURED_FLAG, said)
        sys.stderr.write(f"ringscope: {what} not measured in this process ({reason}); the program runs unchanged\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not stop the training
        pass


def failed(where: str, exc: BaseException) -> None:
    """``off`` for an exception caught in ``where``."""
    off(f"{where}: {type(exc).__name__}: {exc}")


def fault(stage: str) -> None:
    """Raise when ``RINGSCOPE_INJECT_FAULT`` names ``stage`` (a test's deliberately broken injection)."""
    if os.environ.get(ENV_INJECT_FAULT, "").strip() == stage:
        raise RuntimeError(f"{ENV_INJECT_FAULT}={stage}: simulated failure inside the injection")
