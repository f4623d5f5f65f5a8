"""Report and comparison exports from the window, on a worker thread with a progress dialog and a cancel button.

Owns the export user flow: choose a format and a file, run the work (``ringscope.gui.core.report.export``,
``ringscope.gui.core.report.compare.compare_files``) on a ``QThreadPool`` worker (the live window keeps drawing:
loading and analyzing a large session takes seconds), show progress, cancel. The worker never touches a widget: it emits
signals of a QObject living on the GUI thread, which Qt delivers there (queued).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.ingest.session_reader import SessionFileError
from ringscope.gui.core.report import ExportCancelled, ProgressCallback, build_report, export
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.views.qt_background import JobRunnable

FILTERS: dict[str, str] = {
    "HTML report (*.html)": "html",
    "PDF report (*.pdf)": "pdf",
    "Chrome / Perfetto trace (*.json)": "trace",
    "CSV files (a folder)": "csv",
}


Work = Callable[[ProgressCallback, threading.Event], list[Path]]
"""What a job runs on the worker thread: given a progress callback and the cancel flag, returns the files written."""


def report_work(session: SessionData | Callable[[], SessionData], kind: str, path: str,
                price_per_gpu_hour: float | None) -> Work:
    """Analyze ``session`` and export it as ``kind``. A callable ``session`` (e.g. loading the recording being
    written) is called on the worker thread, off the GUI thread."""

    def work(progress: ProgressCallback, cancel: threading.Event) -> list[Path]:
        loaded = session() if callable(session) else session
        return export(build_report(loaded, price_per_gpu_hour), kind, path, progress=progress, cancel=cancel)

    return work


def compare_work(session_a: str, session_b: str, path: str, price_per_gpu_hour: float | None) -> Work:
    """Load, analyze and compare two session files; write HTML, or PDF when ``path`` ends in .pdf."""
    from ringscope.gui.core.report.compare import compare_files

    pdf = path.lower().endswith(".pdf")

    def work(progress: ProgressCallback, cancel: threading.Event) -> list[Path]:
        return compare_files(session_a, session_b, html_path=None if pdf else path, pdf_path=path if pdf else None,
                             price_per_gpu_hour=price_per_gpu_hour, progress=progress, cancel=cancel)[1]

    return work


class ExportJob(QtCore.QObject):
    """One export (a report, a comparison) in flight. Signals arrive on the GUI thread."""

    sig_progressed = QtCore.Signal(float, str)
    """Fraction done (0..1) and what is being done."""
    sig_finished = QtCore.Signal(list)
    """The paths written (list of str)."""
    sig_failed = QtCore.Signal(str)
    """The export failed; the text says why."""
    sig_cancelled = QtCore.Signal()
    """The user cancelled; nothing was written."""

    def __init__(self, kind: str, path: str, work: Work) -> None:
        super().__init__()
        self.kind = kind
        self.path = path
        self._work = work
        self._cancel = threading.Event()
        self.done = False
        self.failure_box: QtWidgets.QMessageBox | None = None  # shown (non-modal) when it failed

    def cancel(self) -> None:
        """Ask the worker to stop at its next progress report."""
        self._cancel.set()

    def run(self) -> None:
        """Runs on the worker thread."""
        try:
            paths = self._work(self._progress, self._cancel)
        except ExportCancelled:
            self.done = True
            self.sig_cancelled.emit()
        except SessionFileError as exc:  # a bad session file: its own message says which file and why
            self.done = True
            self.sig_failed.emit(str(exc))
        except Exception as exc:  # reported to the user, never raised into Qt's event loop
            self.done = True
            self.sig_failed.emit(f"{self.kind} export to {self.path} failed: {exc}\n\n{traceback.format_exc(limit=3)}")
        else:
            self.done = True
            self.sig_finished.emit([str(p) for p in paths])

    def _progress(self, fraction: float, message: str) -> None:
        self.sig_progressed.emit(fraction, message)


class QtReportExporter(QtCore.QObject):
    """Starts exports on a thread pool and shows a progress dialog with Cancel for each."""

    def __init__(self, parent: QtWidgets.QWidget | None = None, pool: QtCore.QThreadPool | None = None) -> None:
        super().__init__(parent)
        self._parent = parent
        # Its own pool: an export never waits behind the window's other background work (loading, comparing) in
        # Qt's global pool, which has as many threads as cores (2 here).
        self._pool = pool or QtCore.QThreadPool(self)
        self.jobs: list[ExportJob] = []

    def start(self, session: SessionData | Callable[[], SessionData], kind: str, path: str,
              price_per_gpu_hour: float | None = None, *, show_progress: bool = True) -> ExportJob:
        """Start one report export; returns its job (connect to its signals). ``kind``: html, pdf, csv or trace."""
        return self.start_work(kind, path, report_work(session, kind, path, price_per_gpu_hour),
                               show_progress=show_progress)

    def start_work(self, kind: str, path: str, work: Work, *, show_progress: bool = True) -> ExportJob:
        """Run ``work`` on the pool with a progress dialog; ``kind`` names it in messages."""
        job = ExportJob(kind, path, work)
        self.jobs.append(job)
        if show_progress:
            self._attach_dialog(job)
        job.sig_finished.connect(lambda _paths, j=job: self._forget(j))
        job.sig_failed.connect(lambda text, j=job: self._failed(j, text))
        job.sig_cancelled.connect(lambda j=job: self._forget(j))
        self._pool.start(JobRunnable(job.run))
        return job

    def _attach_dialog(self, job: ExportJob) -> None:
        dialog = QtWidgets.QProgressDialog(f"Exporting {job.kind} to {Path(job.path).name}…", "Cancel", 0, 1000,
                                           self._parent)
        dialog.setWindowTitle("Export report")
        dialog.setWindowModality(QtCore.Qt.WindowModality.NonModal)  # the live window keeps working
        dialog.setMinimumDuration(300)
        dialog.canceled.connect(job.cancel)
        job.sig_progressed.connect(lambda f, m: (dialog.setValue(int(f * 1000)), dialog.setLabelText(m)))
        for signal in (job.sig_finished, job.sig_failed, job.sig_cancelled):
            signal.connect(dialog.reset)
        job.dialog = dialog  # type: ignore[attr-defined]

    def _failed(self, job: ExportJob, text: str) -> None:
        """Say why in a box that does not block: the window (live charts, other exports) keeps running behind it,
        and nothing waits for the user to close it."""
        self._forget(job)
        if self._parent is None:
            return
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Warning, "Export failed", text.split("\n\n")[0],
                                    QtWidgets.QMessageBox.StandardButton.Ok, self._parent)
        box.setWindowModality(QtCore.Qt.WindowModality.NonModal)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        job.failure_box = box

    def _forget(self, job: ExportJob) -> None:
        if job in self.jobs:
            self.jobs.remove(job)


_exporters: dict[int, QtReportExporter] = {}


def exporter_for(parent: QtWidgets.QWidget) -> QtReportExporter:
    """One exporter per window (kept alive as long as the window)."""
    key = id(parent)
    if key not in _exporters:
        _exporters[key] = QtReportExporter(parent)
        parent.destroyed.connect(lambda *_a, k=key: _exporters.pop(k, None))
    return _exporters[key]


def ask_export_target(parent: QtWidgets.QWidget, suggested_name: str = "ringscope-report.html"
                      ) -> tuple[str, str] | None:
    """Ask for a format and a file (a folder for CSV, created); returns (kind, path), or None when cancelled."""
    path, chosen = QtWidgets.QFileDialog.getSaveFileName(parent, "Export report", suggested_name,
                                                         ";;".join(FILTERS))
    if not path:
        return None
    kind = FILTERS.get(chosen, "html")
    if kind == "csv":
        Path(path).mkdir(parents=True, exist_ok=True)
    return kind, path


def export_report(parent: QtWidgets.QWidget, session: SessionData | Callable[[], SessionData],
                  suggested_name: str = "ringscope-report.html") -> ExportJob | None:
    """Ask for a format and a file, then export in the background.

    ``session`` may be a callable that loads the session; it is then called on the worker thread.
    """
    target = ask_export_target(parent, suggested_name)
    if target is None:
        return None
    kind, path = target
    return exporter_for(parent).start(session, kind, path, _price(parent))


def compare_sessions(parent: QtWidgets.QWidget) -> ExportJob | None:
    """Pick two session files and an output file, then compare them in the background (File > Compare)."""
    files, _ = QtWidgets.QFileDialog.getOpenFileNames(parent, "Choose two sessions to compare", "",
                                                      "Ringscope sessions (*.db);;All files (*)")
    if len(files) != 2:
        if files:
            QtWidgets.QMessageBox.information(parent, "Compare sessions",
                                              f"Choose exactly two session files ({len(files)} chosen).")
        return None
    target, _ = QtWidgets.QFileDialog.getSaveFileName(parent, "Save comparison", "comparison.html",
                                                      "HTML (*.html);;PDF (*.pdf)")
    if not target:
        return None
    return exporter_for(parent).start_work("comparison", target,
                                           compare_work(files[0], files[1], target, _price(parent)))


def _price(parent: QtWidgets.QWidget) -> float | None:
    preferences = getattr(parent, "preferences", None)
    return getattr(preferences, "price_per_gpu_hour", 0.0) or None
