"""Ringscope: the master-node view of data-parallel training.

One import namespace for everything Ringscope installs, so that nothing of it clashes with a user's own ``agent``,
``gui`` or ``trainers`` package:

- ``ringscope.agent``     the telemetry agent that runs inside training processes (no Qt, frameworks lazily);
- ``ringscope.gui``       the master-node application: the Qt-free core, the CLI, and the window (``[gui]`` extra);
- ``ringscope.trainers``  reference trainings that use the agent as a user would;
- ``ringscope.resources`` style sheets, report scripts, dashboards (package data).

In the source tree these are the top-level folders ``agent/``, ``gui/``, ``trainers/`` and ``resources/``; this
folder (``src/ringscope``) links them into the namespace, so the checkout, an editable install and a wheel import the
same names, and ``src/`` holds nothing but ``ringscope``. Importing this package imports nothing else.
"""

from __future__ import annotations

import os

__all__ = ["__version__", "child_pythonpath"]


def child_pythonpath() -> str | None:
    """The folder to put on a child process's ``PYTHONPATH`` so that it can import ``ringscope`` when Ringscope is
    not installed in its interpreter (a source checkout run with another Python), or None when nothing needs adding.

    It is the folder that holds this package: ``src/`` of a checkout, which holds nothing else, so a user's own
    ``agent`` or ``gui`` package is never shadowed. An installed Ringscope (``site-packages``) gives None: putting a
    whole ``site-packages`` on another interpreter's path would mix two environments' packages.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.basename(root) in {"site-packages", "dist-packages"}:
        return None
    return root


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed distribution on first use (a metadata scan costs milliseconds, which
    a training process importing the agent should not pay)."""
    if name != "__version__":
        raise AttributeError(f"module 'ringscope' has no attribute {name!r}")
    from importlib import metadata

    try:
        return metadata.version("ringscope")
    except metadata.PackageNotFoundError:  # a source tree that was not installed
        return "0+unknown"
