"""The sweep's plan: parsing the command line's lists, every refusal in words before anything runs, and the
launcher's processes for each configuration (same options everywhere, the injected delay on exactly one)."""

from __future__ import annotations

import sys

import pytest

from ringscope.gui.core.sweep.plan import (
    Configuration,
    SweepPlan,
    parse_comm_delay,
    parse_frameworks,
    parse_ranks,
    problems,
    process_plans,
    resolve_device,
    trainer_options,
)

ENDPOINT = "tcp://127.0.0.1:5999"


def test_parse_frameworks_ranks_and_delays() -> None:
    assert parse_frameworks("ddp, TF_Mirrored") == ("ddp", "tf-mirrored")
    assert parse_ranks("4,1,2") == (1, 2, 4)
    assert parse_comm_delay("ddp:2=40") == ("ddp:2", 40.0)
    assert parse_comm_delay("tf_mirrored:1=0") == ("tf-mirrored:1", 0.0)


@pytest.mark.parametrize(("parse", "text", "words"), [
    (parse_frameworks, "ddp,horovod", "unknown framework 'horovod'; choose from ddp, tf-mirrored, tf-multi-worker"),
    (parse_frameworks, "ddp,,tf-mirrored", "comma-separated list"),
    (parse_frameworks, "ddp,ddp", "'ddp' is listed twice"),
    (parse_ranks, "1,two", "whole numbers >= 1 (e.g. 1,2,4), got '1,two'"),
    (parse_ranks, "0,1", "whole numbers >= 1"),
    (parse_ranks, "1,2,2", "listed twice"),
    (parse_comm_delay, "ddp:2", "FRAMEWORK:RANKS=MS"),
    (parse_comm_delay, "ddp:2=-5", "milliseconds >= 0"),
    (parse_comm_delay, "ddp=5", "FRAMEWORK:RANKS=MS"),
])
def test_bad_values_say_what_was_seen_and_what_is_accepted(parse, text, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=None) as caught:
        parse(text)
    assert words in str(caught.value)


def test_a_plan_this_machine_can_run_has_no_problems() -> None:
    plan = SweepPlan(("ddp", "tf-mirrored"), (1, 2), steps=60, comm_delays={"ddp:2": 40.0}, device="cpu")
    assert problems(plan, cpu_count=2, gpu_count=0) == []


def test_refusals_name_the_value_and_the_fix() -> None:
    assert problems(SweepPlan(("ddp",), (2, 4), device="cpu"), cpu_count=8, gpu_count=0) == [
        "--ranks 2,4 has no 1: scaling efficiency is throughput(N) / (N x throughput(1)), so every sweep needs a "
        "1-rank run; add 1 (e.g. --ranks 1,2,4)"]
    (cpu,) = problems(SweepPlan(("ddp",), (1, 2, 4), device="cpu"), cpu_count=2, gpu_count=0)
    assert cpu.startswith("--ranks 1,2,4: a CPU run of 4 ranks needs 4 cores (one per rank) and this machine has 2")
    (gpu,) = problems(SweepPlan(("ddp",), (1, 8), device="gpu"), cpu_count=64, gpu_count=4)
    assert "needs 8 GPUs (one per rank) and this machine has 4" in gpu and "--device cpu" in gpu
    multi = problems(SweepPlan(("tf-multi-worker",), (1, 2), device="gpu"), cpu_count=64, gpu_count=4)
    assert multi == ["tf-multi-worker on GPUs: its workers on one machine would all train on GPU 0; sweep it with "
                     "--device cpu, or drop it from --frameworks"]


def test_injected_delays_must_name_a_ddp_configuration_of_the_sweep() -> None:
    def refusal(delays: dict[str, float]) -> list[str]:
        plan = SweepPlan(("ddp", "tf-mirrored"), (1, 2), comm_delays=delays, device="cpu")
        return problems(plan, cpu_count=2, gpu_count=0)

    assert refusal({"tf-mirrored:2": 10}) == ["--comm-delay-ms-for tf-mirrored:2: only the ddp trainer can delay its "
                                              "all-reduce"]
    assert refusal({"ddp:4": 10}) == ["--comm-delay-ms-for ddp:4: the sweep has no configuration ddp:4; it runs "
                                      "ddp:1, ddp:2, tf-mirrored:1, tf-mirrored:2"]
    assert "unknown framework 'jax'" in refusal({"jax:1": 10})[0]


def test_a_bad_trainer_option_is_said_once_for_every_configuration_it_applies_to() -> None:
    plan = SweepPlan(("ddp", "tf-mirrored"), (1, 2), model_width=100_000, device="cpu")
    errors = problems(plan, cpu_count=2, gpu_count=0)
    assert errors == ["ddp:1, ddp:2, tf-mirrored:1, tf-mirrored:2: --model-width: 100000 is out of range; expected "
                      "int in [1, 65536]"]


def test_configurations_run_framework_by_framework_fewest_ranks_first() -> None:
    plan = SweepPlan(("tf-mirrored", "ddp"), (1, 2), comm_delays={"ddp:2": 40.0}, device="cpu")
    assert plan.configurations() == [Configuration("tf-mirrored", 1), Configuration("tf-mirrored", 2),
                                     Configuration("ddp", 1), Configuration("ddp", 2, 40.0)]


def test_every_configuration_gets_the_same_model_data_and_batch() -> None:
    plan = SweepPlan(("ddp", "tf-mirrored", "tf-multi-worker"), (1, 2), steps=60, model_width=128, batch_size=16,
                     dataset="synthetic", device="cpu")
    options = [trainer_options(plan, c) for c in plan.configurations()]
    shared = [{k: v for k, v in o.items() if k != "device"} for o in options]
    assert all(s == shared[0] for s in shared)
    assert shared[0] == {"dataset": "synthetic", "model-width": 128, "model-depth": 2, "batch-size": 16, "steps": 60,
                         "seed": 0}
    assert {o["device"] for o in options} == {"cpu"}
    assert trainer_options(SweepPlan(("ddp",), (1,), device="gpu"), Configuration("ddp", 1))["device"] == "cuda"


def test_processes_are_the_launchers_with_the_delay_on_the_delayed_configuration_only() -> None:
    plan = SweepPlan(("ddp", "tf-mirrored", "tf-multi-worker"), (1, 2), steps=60, comm_delays={"ddp:2": 40.0},
                     device="cpu")
    plain = process_plans(plan, Configuration("ddp", 1), "run-1", ENDPOINT)
    delayed = process_plans(plan, Configuration("ddp", 2, 40.0), "run-2", ENDPOINT)
    assert len(plain) == len(delayed) == 1
    assert plain[0].argv[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    assert "--comm-delay-ms" not in plain[0].argv and delayed[0].argv[-2:] == ["--comm-delay-ms", "40"]
    assert delayed[0].env["RINGSCOPE_RUN_ID"] == "run-2" and delayed[0].env["RINGSCOPE_ENDPOINT"] == ENDPOINT
    mirrored = process_plans(plan, Configuration("tf-mirrored", 2), "run-3", ENDPOINT)
    assert mirrored[0].argv[-4:] == ["--strategy", "mirrored", "--devices", "2"]
    workers = process_plans(plan, Configuration("tf-multi-worker", 2), "run-4", ENDPOINT)
    assert [p.name for p in workers] == ["worker0", "worker1"]


def test_auto_device_is_the_gpu_only_with_one_per_rank() -> None:
    assert resolve_device("auto", gpus=0, most_ranks=1) == "cpu"
    assert resolve_device("auto", gpus=2, most_ranks=4) == "cpu"
    assert resolve_device("auto", gpus=4, most_ranks=4) == "gpu"
    assert resolve_device("cpu", gpus=8, most_ranks=2) == "cpu"
