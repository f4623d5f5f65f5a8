"""Work that must not run on the GUI thread (loading a recording, analyzing two runs) on a ``QThreadPool`` worker.

``start_background(fn)`` runs ``fn()`` on the pool and returns a ``BackgroundJob`` whose signals arrive on the GUI
thread (the job object lives there; Qt queues the emits). The worker never touches a widget. Jobs are kept alive
until they report, so a caller may drop its reference.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from PySide6 import QtCore

log = logging.getLogger(__name__)
_running: set[BackgroundJob] = set()


class BackgroundJob(QtCore.QObject):
    """One call in flight. Connect to the signals right after ``start_background`` returns."""

    sig_done = QtCore.Signal(object)
    """The call returned; argument: its result."""
    sig_failed = QtCore.Signal(str)
    """The call raised; argument: the error in words (first line: what went wrong)."""

    def __init__(self, fn: Callable[[], Any], what: str) -> None:
        super().__init__()
        self._fn = fn
        self.what = what
        self.done = False
        self.result: Any = None
        self.error: str | None = None

    def run(self) -> None:
        """Runs on the worker thread."""
        try:
            result = self._fn()
        except Exception as exc:  # reported to the user, never raised into Qt's event loop
            log.debug("%s failed", self.what, exc_info=True)
            self.error = f"{self.what} failed: {exc}\n\n{traceback.format_exc(limit=3)}"
            self.done = True
            self.sig_failed.emit(self.error)
        else:
            self.result = result
            self.done = True
            self.sig_done.emit(result)


class JobRunnable(QtCore.QRunnable):
    """A job's ``run`` as a ``QThreadPool`` task (the job stays alive while the pool holds the task)."""

    def __init__(self, run: Callable[[], None]) -> None:
        super().__init__()
        self._run = run

    def run(self) -> None:
        self._run()


def start_background(fn: Callable[[], Any], what: str, pool: QtCore.QThreadPool | None = None) -> BackgroundJob:
    """Run ``fn()`` on ``pool`` (default: the global pool); ``what`` names it in error messages."""
    job = BackgroundJob(fn, what)
    _running.add(job)
    job.sig_done.connect(lambda _result, j=job: _running.discard(j))
    job.sig_failed.connect(lambda _text, j=job: _running.discard(j))
    (pool or QtCore.QThreadPool.globalInstance()).start(JobRunnable(job.run))
    return job
