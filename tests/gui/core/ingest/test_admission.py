"""The collector's admission rules (``ringscope.gui.core.ingest.admission``) without a socket: caps refuse before
anything is remembered, sequence numbers tell duplicates, gaps and late joiners apart."""

from __future__ import annotations

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.ingest.admission import Admission
from ringscope.gui.core.ingest.sink import JOINED_LATE

T0 = 1_700_000_000.0


def message(agent_id: str, seq: int, records: list) -> wire.Batch:
    return wire.decode(wire.encode(agent_id, seq, T0, records))


def hello(agent_id: str, run_id: str, ranks: list[int]) -> Hello:
    return Hello(run_id, agent_id, "h", 1, ranks[0], 0, 4, 0, ranks, "simulated", "ddp", None, [], "0.1.0", "1.0",
                 T0, 0.0, T0)


def test_caps_refuse_before_anything_is_remembered() -> None:
    admission = Admission(max_agents=2, max_ranks=3, max_run_ids=1)

    def take(batch: wire.Batch) -> tuple[str, str] | None:  # as the collector does: admit, then track
        refusal = admission.admit(batch)
        if refusal is None:
            admission.track(batch.agent_id, batch.seq, T0)
        return refusal

    assert take(message("a", 0, [hello("a", "r1", [0, 1])])) is None
    refusal = take(message("b", 0, [hello("b", "r1", [2, 3])]))
    assert refusal is not None and refusal[0] == "too_many_ranks" and "accepts at most 3" in refusal[1]
    assert take(message("b", 0, [hello("b", "r1", [2])])) is None  # the refused ranks were not kept
    refusal = take(message("c", 0, [hello("c", "r1", [0])]))
    assert refusal is not None and refusal[0] == "too_many_agents" and admission.agents == 2
    refusal = take(message("a", 1, [hello("a", "r2", [0])]))
    assert refusal is not None and refusal[0] == "too_many_runs"
    assert admission.track("a", 2, T0) is None  # a refused message is counted as rejected, not as a gap as well


def test_sequence_numbers_tell_duplicates_gaps_and_late_joiners_apart() -> None:
    admission = Admission(max_agents=8, max_ranks=8, max_run_ids=8)
    assert admission.track("a", 0, T0) is None
    gap = admission.track("a", 3, T0)
    assert gap is not None and gap.missing == 2
    assert admission.is_duplicate(message("a", 2, [Step(0, 0, T0, T0 + 0.1, 0.1)]))
    late = admission.track("b", 5, T0)
    assert late is not None and late.kind == JOINED_LATE and admission.agents == 2
    admission.continue_from({"c": 9})
    assert admission.is_duplicate(message("c", 9, [])) and admission.track("c", 10, T0) is None
