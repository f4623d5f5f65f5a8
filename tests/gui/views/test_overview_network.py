"""The Straggler card names a host whose link queues when the whole-session analysis says "network"."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.transit import BIN_EDGES_S, Transit
from ringscope.gui.core.live.store import LiveStore
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


def test_a_live_store_without_a_recording_gives_the_card_its_queueing_evidence(qtbot: QtBot) -> None:
    overview = QtOverview()
    qtbot.addWidget(overview)
    session = make_session(ranks=2, allreduce_s=0.060)  # as above, but through a live store's own transit figures
    store = LiveStore()
    for hello in session.agents:
        store.on_batch(wire.decode(wire.encode(hello.agent_id, 0, hello.started_s, [hello])), hello.started_s)
    steps = session.steps
    for row in range(len(steps["rank"])):
        values = {name: column[row] for name, column in steps.items()}
        rank, sent = int(values["rank"]), float(values["end_s"])
        step = Step(rank, int(values["step"]), float(values["start_s"]), sent, float(values["step_s"]),
                    float(values["data_wait_s"]), float(values["compute_s"]), float(values["comm_s"]),
                    float(values["comm_exposed_s"]), int(values["samples"]), None, None, None,
                    bool(values["first_batch"]))
        queued = 0.02 if rank == 1 and row % 2 else 0.0  # node1's link queues every other message 20 ms
        store.on_batch(wire.decode(wire.encode(f"agent-{rank}", row + 1, sent, [step])), sent + 0.0002 + queued)
    overview.show_network(analyze(store.to_session_data()))
    assert overview.network_verdict is not None
    value, evidence = overview.network_verdict
    assert value == "none · network: node1" and "node1's link queues" in evidence
