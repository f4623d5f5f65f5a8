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


def failed(where: str, exc: BaseException) -> None:
    """``off`` for an exception caught in ``where``."""
    off(f"{where}: {type(exc).__name__}: {exc}")


def fault(stage: str) -> None:
    """Raise when ``RINGSCOPE_INJECT_FAULT`` names ``stage`` (a test's deliberately broken injection)."""
    if os.environ.get(ENV_INJECT_FAULT, "").strip() == stage:
        raise RuntimeError(f"{ENV_INJECT_FAULT}={stage}: simulated failure inside the injection")
