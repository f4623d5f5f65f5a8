"""Guards the PySide6 < 6.12 pin: 6.12.0 on Python 3.11 leaks a reference to True per Signal.emit and aborts.

1e5 emits and 1e4 repaints of a pyqtgraph plot in one process must survive (see shared/ENVIRONMENT.md).
"""

from __future__ import annotations

import sys

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore


class _Emitter(QtCore.QObject):
    sig_ticked = QtCore.Signal(int)
    """Emitted once per loop iteration."""


def test_signal_emits_and_repaints_do_not_leak(qtbot) -> None:  # type: ignore[no-untyped-def]
    true_refs = sys.getrefcount(True)
    emitter = _Emitter()
    received = []
    emitter.sig_ticked.connect(received.append)
    for i in range(100_000):
        emitter.sig_ticked.emit(i)
    assert len(received) == 100_000
    widget = pg.PlotWidget()
    widget.resize(160, 120)
    qtbot.addWidget(widget)
    widget.show()
    curve = widget.plot(np.arange(50, dtype=float), np.zeros(50))
    data = np.random.default_rng(0).random(50)
    for i in range(10_000):
        curve.setData(np.arange(50, dtype=float), np.roll(data, i))
        widget.repaint()
    # A leak of one reference per emit drops True's count by ~1e5 (and aborts on 6.12.0). Other code may
    # legitimately free some references to True meanwhile, so only a drop of the leak's size fails.
    assert sys.getrefcount(True) > true_refs - 50_000
