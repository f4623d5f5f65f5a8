"""Analysis against sessions with known, injected delays (synthetic synchronous data parallelism).

``make_session`` models synchronous data parallelism exactly: every rank starts step k together, waits for data,
computes, then the all-reduce ends ``allreduce_s`` after the *last* rank is ready, so each rank's exposed wait is
(last ready - its ready) + allreduce_s. The figures the analysis must find follow from the injected parameters.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ringscope.agent.schema import Event, EventKind, GpuSample, GpuStatus, Hello, HostSample, Step
from ringscope.gui.core.analysis.straggler import sign_test_p
from ringscope.gui.core.analysis.summary import analyze, steady_mask
from ringscope.gui.core.session_data import SessionData, columns_from_rows

DATA_S = 0.004
COMPUTE_S = 0.050
ALLREDUCE_S = 0.020
OTHER_S = 0.002
SAMPLES = 32
FIRST_BATCH_WAIT_S = 0.5


def make_session(ranks: int = 4, steps: int = 120, *, straggler: int | None = None, extra_compute_s: float = 0.0,
                 extra_data_s: float = 0.0, allreduce_s: float = ALLREDUCE_S, throttle: bool = False,
                 gpu: bool = True, mirrored: bool = False, checkpoint_every: int | None = None,
                 restart_at: int | None = None, alternate: bool = False, price: float | None = None,
                 seed: int = 0, t0: float = 1_700_000_000.0, straggler_steps: range | None = None) -> SessionData:
    """A session with known delays. ``alternate`` makes a different rank slow at every step (no straggler)."""
    rng = np.random.default_rng(seed)
    step_rows: list[tuple[object, ...]] = []
    t = t0
    for k in range(steps):
        slow = (k % ranks) if alternate else straggler
        if straggler_steps is not None and k not in straggler_steps:
            slow = None
        data = np.full(ranks, DATA_S)
        compute = COMPUTE_S + rng.uniform(-2e-4, 2e-4, ranks)
        if slow is not None:
            data[slow] += extra_data_s
            compute[slow] += extra_compute_s
        if k == 0:
            data[:] = FIRST_BATCH_WAIT_S  # iterator start-up: reported, kept out of steady state
        ready = t + data + compute
        allreduce_end = ready.max() + allreduce_s
        end = allreduce_end + OTHER_S
        for r in range(ranks):
            exposed = allreduce_end - ready[r]
            step_rows.append(dataclasses.astuple(Step(
                rank=r, step=k, start_s=t, end_s=end, step_s=end - t, data_wait_s=float(data[r]),
                compute_s=float(compute[r]), comm_s=float(exposed), comm_exposed_s=float(exposed), samples=SAMPLES,
                first_batch=k == 0)))
        t = end
    hosts = [f"node{r}" for r in range(ranks)]
    gpu_rows = []
    if gpu:
        for ts in np.arange(t0, t, 0.5):
            for r in range(ranks):
                slow_gpu = throttle and r == straggler
                gpu_rows.append(dataclasses.astuple(GpuSample(
                    ts_s=float(ts), host=hosts[r], gpu_index=0, name="H100", rank=r,
                    util_pct=float(60 if slow_gpu else 90 + rng.uniform(-5, 5)), sm_clock_mhz=1100.0 if slow_gpu
                    else 1980.0, throttle_reasons=4 if slow_gpu else 0)))
    host_rows = [dataclasses.astuple(HostSample(ts_s=t0, host=h, cpu_pct=50.0, gpu_count=1 if gpu else 0,
                                                gpu_status=GpuStatus.OK if gpu else GpuStatus.NO_GPU))
                 for h in hosts]
    if mirrored:
        agents = [Hello("run-m", "agent-0", "node0", 100, 0, 0, ranks, 0, list(range(ranks)), "tensorflow", "mirrored",
                        None, [], "0.1.0", "1.0", t0, 0.0, t0, price)]
    else:
        agents = [Hello("run-d", f"agent-{r}", hosts[r], 100 + r, r, 0, ranks, r, [r], "pytorch", "ddp", "gloo", [],
                        "0.1.0", "1.0", t0, 0.0, t0, price) for r in range(ranks)]
    events: list[Event] = []
    if checkpoint_every:
        step_end = {int(row[1]): float(row[3]) for row in step_rows}
        for k in range(checkpoint_every, steps, checkpoint_every):
            events += [Event(ts_s=step_end[k] + 0.001 * r, event=EventKind.CHECKPOINT_SAVED, rank=r, step=k)
                       for r in range(ranks)]
    if restart_at is not None:
        events.append(Event(ts_s=t0 + restart_at, event=EventKind.RESTART, rank=0, text="restarted by launcher"))
    return SessionData(agents=agents, steps=columns_from_rows("step", step_rows),
                       gpu=columns_from_rows("gpu", gpu_rows), host=columns_from_rows("host", host_rows),
                       events=sorted(events, key=lambda e: e.ts_s), source="synthetic")


def expected_shares(ranks: int, extra_compute_s: float = 0.0, extra_data_s: float = 0.0,
                    allreduce_s: float = ALLREDUCE_S) -> dict[str, float]:
    """The steady-state shares the injected delays imply (one slow rank among ``ranks``)."""
    late = extra_compute_s + extra_data_s
    step = DATA_S + COMPUTE_S + late + allreduce_s + OTHER_S
    means = {"data_wait": DATA_S + extra_data_s / ranks, "compute": COMPUTE_S + extra_compute_s / ranks,
             "comm_exposed": allreduce_s + late * (ranks - 1) / ranks, "other": OTHER_S}
    return {k: v / step for k, v in means.items()}


def test_shares_match_injected_delays_and_hardware_straggler_is_named() -> None:
    session = make_session(ranks=4, straggler=2, extra_compute_s=0.030, throttle=True)
    a = analyze(session)
    want = expected_shares(4, extra_compute_s=0.030)
    for name, share in want.items():
        assert a.overall.shares[name] == pytest.approx(share, abs=0.01), name
    assert a.straggler is not None
    assert a.straggler.rank == 2
    assert a.straggler.gap_s == pytest.approx(0.030, abs=0.002)
    assert a.straggler.cause == "hardware"
    assert "1100 MHz" in a.straggler.cause_detail or "throttle" in a.straggler.cause_detail
    assert a.straggler.windows_flagged == a.straggler.windows_total
    assert a.wait_diagnosis == "straggler"


def test_data_straggler_is_attributed_to_input_pipeline() -> None:
    a = analyze(make_session(ranks=3, straggler=1, extra_data_s=0.040, gpu=False))
    assert a.straggler is not None and a.straggler.rank == 1
    assert a.straggler.cause == "input_pipeline"
    assert a.straggler.gap_s == pytest.approx(0.040, abs=0.002)
    assert a.overall.shares["data_wait"] == pytest.approx(expected_shares(3, extra_data_s=0.04)["data_wait"], abs=0.01)


def test_slow_compute_without_gpu_evidence_is_compute_not_hardware() -> None:
    a = analyze(make_session(ranks=2, straggler=0, extra_compute_s=0.025, gpu=False))
    assert a.straggler is not None and a.straggler.rank == 0
    assert a.straggler.cause == "compute"
    # With two ranks the gap is measured against the other rank, not the median of both (which would halve it).
    assert a.straggler.gap_s == pytest.approx(0.025, abs=0.002)


def test_rotating_slow_rank_is_not_a_straggler() -> None:
    a = analyze(make_session(ranks=4, extra_compute_s=0.030, alternate=True))
    assert a.straggler is None


def test_small_gap_is_not_flagged() -> None:
    a = analyze(make_session(ranks=4, straggler=3, extra_compute_s=0.001))
    assert a.straggler is None


def test_a_lateness_in_a_few_windows_only_is_not_a_straggler() -> None:
    # 7.5 % of the step late, but only in steps 40-79 of 200 (2 of 10 windows): noise-sized, not a straggler ...
    few = analyze(make_session(ranks=2, steps=200, straggler=1, extra_compute_s=0.006, straggler_steps=range(40, 80)))
    assert few.straggler is None
    # ... while the same lateness held over the whole run is one
    held = analyze(make_session(ranks=2, steps=200, straggler=1, extra_compute_s=0.006))
    assert held.straggler is not None and held.straggler.rank == 1


def test_sign_test_separates_a_consistent_lateness_from_turn_taking() -> None:
    rng = np.random.default_rng(3)
    taking_turns = rng.uniform(0.0, 0.002, (2, 300))  # who waits less changes at random
    late = taking_turns.copy()
    late[1] -= 0.0004  # rank 1 consistently arrives 0.4 ms later
    assert sign_test_p(taking_turns, 1) > 0.01
    assert sign_test_p(late, 1) < 1e-6
    assert sign_test_p(np.full((2, 5), np.nan), 0) == 1.0


def test_everyone_waiting_with_even_compute_is_network() -> None:
    a = analyze(make_session(ranks=4, allreduce_s=0.060))
    assert a.straggler is None
    assert a.overall.shares["comm_exposed"] == pytest.approx(expected_shares(4, allreduce_s=0.06)["comm_exposed"],
                                                             abs=0.01)
    assert a.wait_diagnosis == "network"


def test_first_batch_and_warmup_stay_out_of_steady_state() -> None:
    session = make_session(ranks=2, steps=50)
    mask = steady_mask(session.steps)
    assert not mask[session.steps["step"] < 3].any()
    a = analyze(session)
    assert a.steps_steady == 2 * 47
    assert a.overall.seconds["data_wait"] == pytest.approx(DATA_S, abs=1e-4)
    # The first batch's start-up wait is still reported in the timeline (first bucket), not hidden.
    assert np.nanmax(a.timeline.phase_s["data_wait"]) >= FIRST_BATCH_WAIT_S / 2


def test_throughput_and_comm_compute_ratio() -> None:
    a = analyze(make_session(ranks=4, steps=200))
    step = DATA_S + COMPUTE_S + ALLREDUCE_S + OTHER_S
    assert a.throughput_unit == "samples/s"
    assert a.throughput == pytest.approx(4 * SAMPLES / step, rel=0.03)
    assert a.comm_compute_ratio == pytest.approx(ALLREDUCE_S / COMPUTE_S, rel=0.05)
    steady_buckets = a.timeline.throughput[2:-1]
    assert np.nanmedian(steady_buckets) == pytest.approx(4 * SAMPLES / step, rel=0.1)


def test_mirrored_strategy_replicas_from_one_agent() -> None:
    a = analyze(make_session(ranks=2, straggler=1, extra_compute_s=0.02, gpu=False, mirrored=True))
    assert a.strategy == "mirrored"
    assert a.ranks == [0, 1]
    assert a.world_size == 2  # the agent announces its replicas: never multiplied again (was 4)
    assert a.straggler is not None and a.straggler.rank == 1


def _gpu_stats_one_by_one(session: SessionData) -> list[tuple[object, ...]]:
    """The per-GPU figures computed the plain way, a mask and ``np.percentile`` per GPU (the oracle)."""
    gpu = session.gpu
    out = []
    for host, index in sorted({(str(h), int(i)) for h, i in zip(gpu["host"], gpu["gpu_index"], strict=True)}):
        mask = (gpu["host"] == host) & (gpu["gpu_index"] == index)
        util = gpu["util_pct"][mask][~np.isnan(gpu["util_pct"][mask])]
        clock = gpu["sm_clock_mhz"][mask][~np.isnan(gpu["sm_clock_mhz"][mask])]
        throttle = gpu["throttle_reasons"][mask][~np.isnan(gpu["throttle_reasons"][mask])]
        names = [n for n in gpu["name"][mask] if n]
        ranks = gpu["rank"][mask][~np.isnan(gpu["rank"][mask])]
        pct = np.percentile(util, [5, 50, 95]) if util.size else [None] * 3
        out.append((host, index, names[0] if names else None, int(ranks[0]) if ranks.size else None,
                    int(mask.sum()), float(util.mean()) if util.size else None, *pct,
                    float(np.median(clock)) if clock.size else None,
                    float((throttle > 0).mean()) if throttle.size else None))
    return out


def test_gpu_statistics_grouped_in_one_pass_equal_those_of_each_gpu_alone() -> None:
    rng = np.random.default_rng(7)
    rows: list[tuple[object, ...]] = []
    for g in range(60):
        host, index = f"node{g // 8:02d}", g % 8
        for k in range(int(rng.integers(1, 40))):
            util = float("nan") if rng.random() < 0.1 else float(rng.integers(0, 101))
            if g == 5:
                util = float("nan")  # a GPU that never reported utilization
            name = None if k == 0 or g == 7 else ("" if k == 1 else f"GPU-{g % 3}")
            rank = None if k < 2 or g == 9 else g
            clock = float("nan") if g % 4 == 0 else float(rng.integers(900, 1980))
            throttle = None if g % 5 == 0 else int(rng.integers(0, 3))
            rows.append((1e9 + k, host, index, None, name, rank, util, None, None, None, None, None, None, clock,
                         throttle))
    order = rng.permutation(len(rows))  # a recording's rows interleave the GPUs
    for sample in (rows, [rows[i] for i in order]):
        session = SessionData(gpu=columns_from_rows("gpu", sample))
        got = [dataclasses.astuple(g) for g in analyze(session).gpus]
        want = _gpu_stats_one_by_one(session)
        assert [g[:5] for g in got] == [w[:5] for w in want]
        assert np.allclose(np.array([g[5:] for g in got], dtype=float), np.array([w[5:] for w in want], dtype=float),
                           rtol=1e-12, atol=0, equal_nan=True)
        assert any(g[5] is None for g in got) and any(g[2] is None for g in got) and any(g[3] is None for g in got)


def test_gpu_statistics_and_no_gpu_statement() -> None:
    a = analyze(make_session(ranks=2, straggler=1, extra_compute_s=0.03, throttle=True))
    assert a.gpu_present
    slow = next(g for g in a.gpus if g.rank == 1)
    fast = next(g for g in a.gpus if g.rank == 0)
    assert slow.util_p50 == pytest.approx(60)
    assert fast.util_p5 is not None and fast.util_p95 is not None
    assert fast.util_p5 <= fast.util_p50 <= fast.util_p95  # type: ignore[operator]
    assert slow.throttled_share == 1.0
    cpu = analyze(make_session(ranks=2, gpu=False))
    assert not cpu.gpu_present and cpu.gpus == []
    assert "No GPU" in cpu.gpu_statement


def test_checkpoints_are_counted_once_across_ranks_and_restarts_counted() -> None:
    a = analyze(make_session(ranks=4, steps=100, checkpoint_every=30, restart_at=2))
    assert len(a.checkpoints_s) == 3  # steps 30, 60, 90, each reported by 4 ranks
    step = DATA_S + COMPUTE_S + ALLREDUCE_S + OTHER_S
    for interval in a.checkpoint_intervals_s:
        assert interval == pytest.approx(30 * step, rel=0.05)
    assert a.restarts == 1


def test_empty_session_does_not_crash() -> None:
    a = analyze(SessionData())
    assert a.steps_total == 0 and a.straggler is None and a.throughput is None


def test_first_batch_not_sent_counts_as_not_first() -> None:
    session = make_session(ranks=2, steps=30)
    session.steps["first_batch"] = np.full(len(session.steps["step"]), np.nan)  # an agent that never sends it
    a = analyze(session)
    assert a.steps_steady == 2 * (30 - 3)  # only the warm-up is dropped


def test_per_rank_summaries_in_one_pass_equal_the_per_rank_masks() -> None:
    from ringscope.gui.core.analysis.summary import _breakdown, _rank_summaries, _throughput, phase_seconds, steady_mask

    session = make_session(ranks=4, straggler=2, extra_compute_s=0.02)
    steps = {name: column.copy() for name, column in session.steps.items()}
    steps["samples"][steps["rank"] == 1] = np.nan  # a rank that reports no samples
    steps["compute_s"][::7] = np.nan  # some steps without phases
    steps["step_s"][::11] = np.nan
    phases, steady = phase_seconds(steps), steady_mask(steps)
    fast = _rank_summaries(steps, phases, steady)
    assert [r.rank for r in fast] == [0, 1, 2, 3]
    for summary in fast:
        mine = steps["rank"] == summary.rank
        reference = _breakdown(steps, phases, mine & steady)
        assert summary.steps_total == int(mine.sum())
        assert summary.breakdown.steps == reference.steps
        assert summary.breakdown.step_s == pytest.approx(reference.step_s, rel=1e-12)
        assert summary.breakdown.unmeasured_s == pytest.approx(reference.unmeasured_s, rel=1e-12, abs=1e-15)
        for name, value in reference.seconds.items():
            assert summary.breakdown.seconds[name] == pytest.approx(value, rel=1e-12, abs=1e-15)
        throughput, unit = _throughput({k: steps[k][mine] for k in ("start_s", "end_s", "samples")}, steady[mine])
        expected = throughput if unit == "samples/s" else None
        assert summary.samples_per_s == (None if expected is None else pytest.approx(expected, rel=1e-12))
    assert fast[1].samples_per_s is None


def test_steady_mask_in_one_sort_equals_a_mask_per_rank() -> None:
    """The vectorized warm-up mask drops exactly each rank's first steps by step number (ties in arrival order),
    never more than half a rank's steps, and leaves NaN ranks alone, as a mask per rank did."""
    rng = np.random.default_rng(5)
    n = 3000
    ranks = rng.integers(0, 7, n).astype(np.float64)
    ranks[rng.integers(0, n, 20)] = np.nan
    steps = {"rank": ranks, "step": rng.integers(0, 40, n).astype(np.float64),
             "first_batch": rng.choice([0.0, 1.0, np.nan], n, p=[0.8, 0.1, 0.1])}
    steps["rank"][:2] = 9.0  # a rank with 2 steps: at most 1 dropped
    for warmup in (0, 3, 50):
        expected = ~(np.nan_to_num(steps["first_batch"], nan=0.0) > 0)
        for rank in np.unique(ranks):
            idx = np.flatnonzero(ranks == rank)
            skip = min(warmup, len(idx) // 2)
            if skip:
                expected[idx[np.argsort(steps["step"][idx], kind="stable")][:skip]] = False
        np.testing.assert_array_equal(steady_mask(steps, warmup), expected)
