"""The Straggler card names a host whose link queues when the whole-session analysis says "network"."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.transit import BIN_EDGES_S, Transit
from ringscope.gui.views.qt_overview import QtOverview
from tests.gui.core.analysis.test_analysis import make_session


def _transit(queued_bin: int) -> Transit:
    counts = [0] * (len(BIN_EDGES_S) + 1)
    counts[queued_bin] = 100
    return Transit(100, 0.0002, counts)


def test_a_queueing_link_is_named_on_the_card_and_a_quiet_one_is_not(qtbot: QtBot) -> None:
    overview = QtOverview()
    qtbot.addWidget(overview)
    session = make_session(ranks=2, allreduce_s=0.060)  # every rank waits, compute even; one host per rank
    session.counters["transit"] = {"agent-0": _transit(0), "agent-1": _transit(BIN_EDGES_S.index(0.02))}
    overview.show_network(analyze(session))
    assert overview.network_verdict is not None
    value, evidence = overview.network_verdict
    assert value == "none · network: node1" and "node1's link queues" in evidence
    session.counters["transit"] = {"agent-0": _transit(0), "agent-1": _transit(0)}  # no link queues
    overview.show_network(analyze(session))
    assert overview.network_verdict is None
