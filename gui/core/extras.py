"""Optional parts of Ringscope and the one-line message that says which extra to install when one is missing.

``pip install ringscope`` is what a training node needs (the agent, ``run``, ``record``, ``info``, HTML/CSV/trace
reports, the metrics endpoint). The extras add the rest:

- ``gui``: the window (PySide6, pyqtgraph) and PDF reports (matplotlib);
- ``pdf``: PDF reports alone, for a headless master node (matplotlib);
- ``torch`` / ``tf``: the frameworks, for machines that do not have them yet.

A command checks what it needs before it starts (``require``); ``ringscope.gui.cli`` prints a ``MissingExtraError`` as
one line and exits 2. Never imports the modules it checks: finding them is enough, and cheap.
"""

from __future__ import annotations

import importlib.util
from typing import Final

EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "gui": ("PySide6", "pyqtgraph", "matplotlib"),
    "pdf": ("matplotlib",),
    "torch": ("torch",),
    "tf": ("tensorflow",),
}
"""Each extra of ``pyproject.toml`` and the top-level modules that show it is installed."""


class MissingExtraError(RuntimeError):
    """Something the user asked for needs an extra that is not installed; ``str()`` is the one line to print."""

    def __init__(self, extra: str, what: str, missing: tuple[str, ...]) -> None:
        self.extra = extra
        self.missing = missing
        super().__init__(f"{what} needs the '{extra}' extra (not installed in this Python: {', '.join(missing)}): "
                         f"pip install 'ringscope[{extra}]'")


def missing_modules(extra: str) -> tuple[str, ...]:
    """The modules of ``extra`` that this Python cannot import (empty when the extra is installed)."""
    return tuple(name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None)


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtraError`` when ``extra`` is not installed; ``what`` names what needs it ("the window")."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, what, missing)
