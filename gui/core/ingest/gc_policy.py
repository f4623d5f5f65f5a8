"""Python's cyclic garbage collector in the processes that receive telemetry: the window's ingest process,
``ringscope record`` and the recorder's own process.

Nearly everything these processes allocate dies by reference counting moments later: a message's lists and records,
the rows queued for the recorder, a frame's intermediate lists. With the interpreter's thresholds (700, 10, 10) these
still cross the young generation's threshold many times a second while alive, are traversed, promoted, and traversed
again, and every collection stops every thread (the collector's, the frames', the recorder's writer).

Measured with ``gc.callbacks`` timing each collection in the ingest process, 1024 ranks x 10 steps/s recorded
(``python -m benchmarks.bench_gui --measure 1024 20 10 --record``, ~30 s of the process's life): with the default
thresholds 1 080 young, 99 middle and 8 full collections, **1.36 s** of stop-the-world in all, the longest 52 ms (a
full one) and 24 ms (a middle one). With the young threshold at 50 000: 89 young and 8 middle collections, **17 ms**
in all, the longest 1.7 ms. Cycles are still collected (here every ~0.3 s), and the older generations keep their
default ratios. The window's own process collects on its GUI thread instead (``gui.views.qt_gc``); the agents leave
the training process's collector as the training set it.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final[int] = 50_000
"""Net allocations of tracked objects between two young collections (CPython's default: 700)."""


def tune_for_ingest() -> None:
    """Raise the young generation's threshold of this process to ``YOUNG_THRESHOLD`` (the older generations' stay).
    Call once at the start of a process that receives telemetry; never in a training process or in a library."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
