"""Progress reporting and cancellation shared by every export (a large session takes seconds to export).

Owns the ``ExportCancelled`` error and a small ``Progress`` helper. It must never touch Qt: the view passes a plain
callback and any object with ``is_set()`` (``threading.Event``) as the cancel flag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

ProgressCallback = Callable[[float, str], None]
"""Called with (fraction done 0..1, what is being done now)."""


class CancelFlag(Protocol):
    """Anything with ``is_set()``, e.g. ``threading.Event``."""

    def is_set(self) -> bool:
        """True once the user asked to cancel."""
        ...


class ExportCancelled(Exception):  # noqa: N818 - a cancel is not an error
    """The user cancelled an export; no output file was left behind."""


class Progress:
    """Maps a sub-task onto a slice of the overall progress and checks the cancel flag at each report."""

    def __init__(self, callback: ProgressCallback | None = None, cancel: CancelFlag | None = None,
                 start: float = 0.0, end: float = 1.0) -> None:
        self._callback = callback
        self._cancel = cancel
        self._start = start
        self._end = end

    def __call__(self, fraction: float, message: str) -> None:
        """Report progress within this slice; raise ``ExportCancelled`` if cancel was requested."""
        if self._cancel is not None and self._cancel.is_set():
            raise ExportCancelled(f"export cancelled at {message!r}")
        if self._callback is not None:
            self._callback(self._start + (self._end - self._start) * min(max(fraction, 0.0), 1.0), message)

    def slice(self, start: float, end: float) -> Progress:
        """A child that reports ``0..1`` as ``start..end`` of this one."""
        width = self._end - self._start
        return Progress(self._callback, self._cancel, self._start + width * start, self._start + width * end)
