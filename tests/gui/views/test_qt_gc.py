"""Qt objects are destroyed on the GUI thread, by reference counting, never by a collector pass at a random moment.

A view held only by a reference cycle is destroyed whenever Python's collector next runs: inside event processing,
or on whichever thread allocated last. A Qt child holding its view's bound method made such a cycle, and tearing it
apart segfaulted in ``~QBoxLayout`` (twice in about ten full runs, CI included, in a later test's teardown).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable

import pytest
from PySide6 import QtCore, QtWidgets

from ringscope.gui.views.qt_cost_panel import QtCostPanel
from ringscope.gui.views.qt_gc import collect_anywhere, collect_on_gui_thread
from ringscope.gui.views.qt_gpu_panel import QtGpuPanel
from ringscope.gui.views.qt_overview import QtOverview
from ringscope.gui.views.qt_plot_tools import HoverReadout, make_plot
from ringscope.gui.views.qt_rank_timeline import QtRankTimeline
from ringscope.gui.views.qt_runs_table import QtRunsTable, RunsTableModel
from ringscope.gui.views.qt_status_bar import QtExportNotice, QtStatusBar
from ringscope.gui.views.qt_step_breakdown import QtStepBreakdown
from ringscope.gui.views.qt_sweep_form import QtSweepForm

VIEWS: dict[str, Callable[[], QtWidgets.QWidget]] = {
    "gpu panel": QtGpuPanel,
    "AllReduce timeline": lambda: QtRankTimeline("comm_exposed"),
    "data-wait timeline": lambda: QtRankTimeline("data_wait"),
    "step breakdown": QtStepBreakdown,
    "overview": QtOverview,
    "cost panel": QtCostPanel,
    "status bar": QtStatusBar,
    "export notice": QtExportNotice,
    "runs table": lambda: QtRunsTable(RunsTableModel()),
    "sweep form": lambda: QtSweepForm(cpu_count=2, gpu_count=0),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_a_view_let_go_is_freed_at_once_not_left_to_the_collector(qapp, name: str) -> None:  # type: ignore[no-untyped-def]
    gc.collect()
    gc.disable()  # only reference counting may free it here
    try:
        view = weakref.ref(VIEWS[name]())
        assert view() is None, f"the {name} is held by a reference cycle: {_cycle_hint(view())}"
    finally:
        gc.enable()


def test_a_hover_readout_holds_neither_its_plot_nor_its_view(qtbot) -> None:  # type: ignore[no-untyped-def]
    class View(QtWidgets.QWidget):
        def __init__(self) -> None:
            super().__init__()
            self.plot = make_plot("y", None, "x", None)
            self.plot.setParent(self)
            self.hover = HoverReadout(self.plot, self.describe)

        def describe(self, x: float, y: float) -> str:
            return f"{x:.0f},{y:.0f}"

    view = View()
    assert view.hover.text_at(1.0, 2.0) == "1,2"  # the view's method is still what it calls
    view.resize(400, 300)
    view.plot.resize(400, 300)
    view.show()
    view.plot.setXRange(0, 10, padding=0)
    view.plot.setYRange(0, 10, padding=0)
    qtbot.waitExposed(view)
    box = view.plot.getPlotItem().vb
    view.plot.scene().sigMouseMoved.emit(box.mapViewToScene(QtCore.QPointF(3.0, 7.0)))  # the mouse over (3, 7)
    assert view.hover.last_text == "3,7"  # found through its Qt parent, the plot
    view.close()
    plain = HoverReadout(view.plot, lambda x, y: "plain")
    assert plain.text_at(0.0, 0.0) == "plain"  # a plain function is held as it is: nothing else holds it
    gc.disable()
    try:
        gone = weakref.ref(view)
        del view
        assert gone() is None
    finally:
        gc.enable()


def test_cycles_are_collected_on_the_gui_thread_once_the_window_asks_for_it(qtbot) -> None:  # type: ignore[no-untyped-def]
    freed_on: list[str] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            freed_on.append(threading.current_thread().name)

    def make_garbage() -> None:
        for _ in range(20_000):  # far past the collector's first threshold (700 allocations)
            Cycle()

    def on_a_worker() -> None:
        worker = threading.Thread(target=make_garbage, name="worker")
        worker.start()
        worker.join()

    gc.collect()
    on_a_worker()  # the interpreter's default: the worker's own allocations collect its cycles, on the worker
    assert "worker" in freed_on
    gc.collect()
    freed_on.clear()
    collect_on_gui_thread(interval_s=0.05)
    try:
        on_a_worker()
        assert freed_on == []  # nothing collected on the worker
        qtbot.waitUntil(lambda: len(freed_on) > 0, timeout=5_000)  # the GUI thread's timer collects them
        assert set(freed_on) == {threading.main_thread().name}
    finally:
        collect_anywhere()
    assert gc.isenabled()


def _cycle_hint(obj: object) -> str:
    """What refers to the view (the first few referrers' types), to start the hunt for the cycle."""
    return ", ".join(sorted({type(r).__name__ for r in gc.get_referrers(obj)})[:8]) if obj is not None else ""
