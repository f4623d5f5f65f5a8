"""Python's cyclic garbage collector, run on the GUI thread only.

CPython collects cycles on whichever thread's allocation crosses the collector's threshold. A Qt object held only
by a reference cycle is then destroyed on that thread: in the window's process a worker thread (the ingest
supervisor, a stack request, the demo training's feeder) would delete a widget outside the GUI thread, which Qt does
not survive. pyqtgraph's ``GarbageCollector`` turns automatic collection off and collects from a timer on the GUI
thread instead; objects freed by reference counting (nearly all of them) are not affected.
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0  # how often the GUI thread looks at the collector's counts (it collects only past its thresholds)

_collector: GarbageCollector | None = None


def collect_on_gui_thread(interval_s: float = INTERVAL_S) -> GarbageCollector:
    """Turn automatic collection off and collect from the GUI thread's event loop; call on the GUI thread, once a
    QApplication exists. Idempotent."""
    global _collector
    if _collector is None:
        _collector = GarbageCollector(interval=interval_s)
    return _collector


def collect_anywhere() -> None:
    """Undo ``collect_on_gui_thread``: automatic collection again (tests restore the interpreter's default)."""
    global _collector
    if _collector is not None:
        _collector.timer.stop()
        _collector = None
    gc.enable()
