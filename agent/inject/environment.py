"""The environment that injects Ringscope into a command: one implementation for ``ringscope run`` and the launcher.

It builds variables only: it never starts a process and never imports torch, tensorflow or Qt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ringscope.agent.runtime import ENV_DISABLE, ENV_ENDPOINT, ENV_RUN_ID

STARTUP_DIR: Final[Path] = Path(__file__).resolve().parent / "startup"
"""The directory holding the ``sitecustomize`` bootstrap; first on ``PYTHONPATH`` of an injected command."""
ENV_INJECT_FAULT: Final[str] = "RINGSCOPE_INJECT_FAULT"
"""Test hook: ``bootstrap`` / ``import`` / ``attach`` forces a failure at that stage of the injection."""


def injection_env(
    base: Mapping[str, str],
    *,
    endpoint: str | None = None,
    run_id: str | None = None,
) -> dict[str, str]:
    """The variables to add to ``base`` (the environment the command would get) to inject Ringscope.

    ``PYTHONPATH`` gets ``STARTUP_DIR`` in front of what ``base`` has (once, however often this is applied);
    ``endpoint`` / ``run_id``, when given, become ``RINGSCOPE_ENDPOINT`` / ``RINGSCOPE_RUN_ID``.
    """
    added = {"PYTHONPATH": prepend_path(str(STARTUP_DIR), base.get("PYTHONPATH", ""))}
    if endpoint is not None:
        added[ENV_ENDPOINT] = endpoint
    if run_id is not None:
        added[ENV_RUN_ID] = run_id
    return added


def prepend_path(entry: str, path: str) -> str:
    """``entry`` first in the ``os.pathsep``-separated ``path``, without duplicates or empty items."""
    rest = [item for item in path.split(os.pathsep) if item and os.path.abspath(item) != os.path.abspath(entry)]
    return os.pathsep.join([entry, *rest])


def disabled_by_environment(env: Mapping[str, str]) -> bool:
    """Whether ``RINGSCOPE_DISABLE`` in ``env`` turns Ringscope off (the same values ``ringscope.agent.runtime``
    accepts)."""
    return env.get(ENV_DISABLE, "").strip() in {"1", "true", "yes"}
