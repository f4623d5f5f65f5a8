"""The Qt-free launcher with real processes: validation, plans, start/output, stop/kill, crash reports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from ringscope.gui.core.launch import (
    OPTIONS,
    Launcher,
    LaunchError,
    LaunchSpec,
    ManagedProcess,
    OutputBuffer,
    ProcessPlan,
    build_commands,
    demo_spec,
    option_for,
    options_for,
    parse_env_lines,
    validate,
)

ENDPOINT = "tcp://127.0.0.1:5999"


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    instance = Launcher(ENDPOINT)
    yield instance
    instance.kill()  # teardown: nothing a test started survives it
    instance.stop(grace_s=0.5)


def write_script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def wait_for(condition: Callable[[], bool], launcher: Launcher, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        launcher.poll()
        if condition():
            return True
        time.sleep(0.05)
    return False


def all_lines(process: ManagedProcess) -> list[str]:
    return process.output.since(0)[2]


# ---- Validation ------------------------------------------------------------------------------------------------

def test_missing_script_is_rejected_with_its_path(tmp_path: Path) -> None:
    errors = validate(LaunchSpec(kind="script", trainer=str(tmp_path / "nope.py"), processes=1))
    assert len(errors) == 1 and "nope.py" in errors[0] and "not found" in errors[0]


def test_plain_script_needs_a_script() -> None:
    errors = validate(LaunchSpec(kind="script", trainer="reference", processes=1))
    assert errors and "needs a script path" in errors[0]


def test_nonexistent_interpreter_is_launcher_not_found(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ok.py", "print('hi')\n")
    errors = validate(LaunchSpec(kind="script", trainer=script, processes=1, python=str(tmp_path / "no-python")))
    assert len(errors) == 1 and errors[0].startswith("launcher not found") and "no-python" in errors[0]


def test_python_without_torch_is_launcher_not_found_for_ddp(tmp_path: Path) -> None:
    # A real interpreter that cannot see site-packages (-S): torch is not importable from it.
    fake = tmp_path / "python-without-torch"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    fake.chmod(0o755)
    script = write_script(tmp_path, "train.py", "print('hi')\n")
    errors = validate(LaunchSpec(kind="ddp", trainer=script, processes=2, python=str(fake)))
    assert len(errors) == 1 and "launcher not found" in errors[0] and "'torch'" in errors[0]
    # the same interpreter is fine for a plain script
    assert validate(LaunchSpec(kind="script", trainer=script, processes=1, python=str(fake))) == []


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("steps", "abc", "'abc' is not a whole number"),
    ("steps", -5, "out of range"),
    ("lr", "fast", "'fast' is not a number"),
    ("lr", "nan", "not a finite number"),
    ("batch-size", 0, "out of range"),
    ("dataset", "imagenet", "'imagenet' is not one of digits | synthetic"),
    ("compression", "zip", "not one of"),
    ("no-such-option", 1, "unknown trainer option"),
    ("fit", True, "applies to the TensorFlow trainer only"),
])
def test_bad_option_values_are_rejected(name: str, value: object, expected: str) -> None:
    spec = LaunchSpec(kind="ddp", processes=2, options={name: value})  # type: ignore[dict-item]
    errors = [e for e in validate(spec) if "reference trainer trainers." not in e]  # trainer may not exist yet
    assert len(errors) == 1, errors
    assert expected in errors[0] and f"--{name}" in errors[0]


@pytest.mark.parametrize(("kind", "options", "expected"), [
    ("ddp", {"steps": 10, "epochs": 2}, "--steps and --epochs both given"),
    ("ddp", {"slow-rank": 2, "slow-ms": 50}, "--slow-rank 2 does not exist: this run has 2 rank(s)"),
    ("tf_mirrored", {"slow-rank": 1}, "--slow-rank 1 needs --slow-ms"),
    ("ddp", {"slow-ms": 20}, "--slow-ms 20.0 needs --slow-rank"),
    ("ddp", {"checkpoint-every-steps": 5, "resume": True}, "--checkpoint-every-steps, --resume needs --checkpoint-dir"),
    ("ddp", {"amp": True, "device": "cpu"}, "--amp needs a GPU"),
    ("ddp", {"device": "gpu"}, "'gpu' is not one of auto | cpu | cuda"),
    ("tf_multi_worker", {"device": "cuda"}, "'cuda' is not one of auto | cpu | gpu"),
])
def test_option_combinations_the_trainer_would_refuse(kind: str, options: dict, expected: str) -> None:
    errors = [e for e in validate(LaunchSpec(kind=kind, processes=2, options=options))  # type: ignore[arg-type]
              if "reference trainer trainers." not in e]
    assert len(errors) == 1 and expected in errors[0], errors


@pytest.mark.parametrize("processes", [0, -1, 5000])
def test_bad_process_counts_are_rejected(tmp_path: Path, processes: int) -> None:
    script = write_script(tmp_path, "ok.py", "pass\n")
    errors = validate(LaunchSpec(kind="script", trainer=script, processes=processes))
    assert len(errors) == 1 and str(processes) in errors[0] and "out of range" in errors[0]


def test_missing_working_dir_and_bad_env_are_rejected(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ok.py", "pass\n")
    spec = LaunchSpec(kind="script", trainer=script, processes=1, working_dir=str(tmp_path / "gone"),
                      env={"1BAD": "x", "RINGSCOPE_RUN_ID": "mine"})
    errors = validate(spec)
    assert any("working directory" in e and "gone" in e for e in errors)
    assert any("'1BAD=x' is not KEY=VALUE" in e for e in errors)
    assert any("RINGSCOPE_RUN_ID is set by the launcher" in e for e in errors)


def test_options_are_refused_for_own_scripts(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ok.py", "pass\n")
    errors = validate(LaunchSpec(kind="script", trainer=script, processes=1, options={"steps": 3}))
    assert len(errors) == 1 and "reference trainers only" in errors[0]


def test_mwms_port_in_use_is_rejected(tmp_path: Path) -> None:
    script = write_script(tmp_path, "w.py", "pass\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        spec = LaunchSpec(kind="tf_multi_worker", trainer=script, processes=2, base_port=busy)
        errors = validate(spec)
        assert any(f"port {busy}" in e and "in use" in e and "worker 0" in e for e in errors), errors


def test_env_lines_parse_and_report() -> None:
    env, errors = parse_env_lines("A=1\n# comment\n\nB = two=2\nnot a pair\n")
    assert env == {"A": "1", "B": " two=2"}
    assert len(errors) == 1 and "line 5" in errors[0]


def test_option_table_covers_each_framework() -> None:
    ddp = {o.name for o in options_for("ddp")}
    tf = {o.name for o in options_for("tf")}
    assert {"compression", "bucket-mb"} <= ddp - tf
    assert {"fit"} <= tf - ddp
    assert {"dataset", "steps", "slow-rank", "checkpoint-dir", "resume", "device", "amp", "prefetch"} <= ddp & tf
    assert option_for("device", "ddp").choices == ("auto", "cpu", "cuda")  # type: ignore[union-attr]
    assert option_for("device", "tf").choices == ("auto", "cpu", "gpu")  # type: ignore[union-attr]
    for option in OPTIONS:  # every pre-filled default passes its own check
        if option.default is not None:
            framework = "ddp" if "ddp" in option.frameworks else "tf"
            assert validate(LaunchSpec(kind="ddp" if framework == "ddp" else "tf_mirrored",
                                       options={option.name: option.default})) in ([], [
                f"reference trainer trainers.{'ddp' if framework == 'ddp' else 'tf'}_trainer is not installed "
                "with this app; choose your own script"])


# ---- Plans -----------------------------------------------------------------------------------------------------

def test_ddp_plan_runs_torchrun_of_this_interpreter_with_options() -> None:
    spec = LaunchSpec(kind="ddp", processes=3, options={"steps": "40", "amp": True, "resume": False},
                      run_id="r1", env={"EXTRA": "1"})
    (plan,) = build_commands(spec, ENDPOINT)
    assert plan.argv[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
    assert plan.argv[6:] == ["-m", "ringscope.trainers.ddp_trainer", "--steps", "40", "--amp"]
    assert plan.env["RINGSCOPE_ENDPOINT"] == ENDPOINT and plan.env["RINGSCOPE_RUN_ID"] == "r1"
    assert plan.env["PYTHONUNBUFFERED"] == "1" and plan.env["EXTRA"] == "1"


def test_tf_mirrored_plan_is_one_process_with_devices() -> None:
    (plan,) = build_commands(LaunchSpec(kind="tf_mirrored", processes=4, options={"fit": True}), ENDPOINT)
    assert plan.argv[1:] == ["-m", "ringscope.trainers.tf_trainer", "--fit", "--strategy", "mirrored", "--devices", "4"]


def test_mwms_plan_has_distinct_free_ports_and_one_tf_config_per_worker() -> None:
    plans = build_commands(LaunchSpec(kind="tf_multi_worker", processes=3, run_id="mw"), ENDPOINT)
    assert [p.name for p in plans] == ["worker0", "worker1", "worker2"]
    configs = [json.loads(p.env["TF_CONFIG"]) for p in plans]
    workers = configs[0]["cluster"]["worker"]
    assert len(set(workers)) == 3 and all(c["cluster"]["worker"] == workers for c in configs)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    for address in workers:  # the ports are free: each can be bound
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", int(address.split(":")[1])))
    assert all("--strategy" in p.argv and "multi_worker_mirrored" in p.argv for p in plans)
    assert {p.env["RINGSCOPE_RUN_ID"] for p in plans} == {"mw"}


def test_spec_round_trips_through_dict(tmp_path: Path) -> None:
    spec = LaunchSpec(kind="tf_multi_worker", trainer="/x/y.py", script_args=("--a", "b c"), processes=3,
                      options={}, working_dir=str(tmp_path), env={"K": "V"}, run_id="r", base_port=30000)
    data = json.loads(json.dumps(spec.to_dict()))
    again = LaunchSpec.from_dict(data)
    assert again.run_id is None and again.script_args == ("--a", "b c") and again.base_port == 30000
    assert LaunchSpec.from_dict(data).to_dict() == spec.to_dict()
    with pytest.raises(ValueError, match="kind 'mpi'"):
        LaunchSpec.from_dict({"kind": "mpi"})


def test_demo_spec_is_a_two_rank_ddp_with_a_straggler_and_checkpoints() -> None:
    spec = demo_spec(steps=300, gpus=0)
    assert spec.kind == "ddp" and spec.processes == 2 and spec.uses_reference
    assert spec.options["slow-rank"] == 1 and float(spec.options["slow-ms"]) > 0
    assert float(spec.options["data-delay-ms"]) > 0 and spec.options["device"] == "cpu"
    assert os.path.isdir(str(spec.options["checkpoint-dir"]))
    gpu_spec = demo_spec(gpus=2)
    assert gpu_spec.options["device"] == "cuda"
    for made in (spec, gpu_spec):
        shutil.rmtree(str(made.options["checkpoint-dir"]))
    errors = validate(spec)
    assert errors in ([], ["reference trainer ringscope.trainers.ddp_trainer is not installed with this app; "
                           "choose your own script"])


# ---- Processes -------------------------------------------------------------------------------------------------

def test_output_buffer_is_bounded_and_counts_what_was_missed() -> None:
    buffer = OutputBuffer(capacity=3)
    for i in range(5):
        buffer.append(f"l{i}")
    seen, missed, lines = buffer.since(1)
    assert (seen, missed, lines) == (5, 1, ["l2", "l3", "l4"])
    assert buffer.since(5) == (5, 0, []) and buffer.tail(2) == ["l3", "l4"]


def test_started_processes_get_env_and_their_output_is_read(tmp_path: Path, launcher: Launcher) -> None:
    script = write_script(tmp_path, "echo.py", (
        "import os\n"
        "for key in ('RINGSCOPE_ENDPOINT', 'RINGSCOPE_RUN_ID', 'RANK', 'WORLD_SIZE', 'PYTHONUNBUFFERED', 'MINE'):\n"
        "    print(key, os.environ.get(key))\n"
        "print('cwd', os.getcwd())\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=script, processes=2, env={"MINE": "yes"},
                                    working_dir=str(tmp_path)))
    assert wait_for(lambda: not run.alive, launcher)
    assert run.ok and [p.state for p in run.processes] == ["exited", "exited"]
    for rank, process in enumerate(run.processes):
        lines = all_lines(process)
        assert f"RINGSCOPE_ENDPOINT {ENDPOINT}" in lines and f"RINGSCOPE_RUN_ID {run.run_id}" in lines
        assert f"RANK {rank}" in lines and "WORLD_SIZE 2" in lines and "PYTHONUNBUFFERED 1" in lines
        assert "MINE yes" in lines and f"cwd {tmp_path}" in lines
        assert process.returncode == 0 and process.pid is not None


def test_crashing_process_is_reported_with_exit_code_and_last_lines(tmp_path: Path, launcher: Launcher) -> None:
    script = write_script(tmp_path, "crash.py", (
        "import sys\nfor i in range(30):\n    print('line', i)\nprint('boom: out of memory', file=sys.stderr)\n"
        "sys.exit(3)\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=script, processes=1))
    changes = []
    deadline = time.monotonic() + 20
    while run.alive and time.monotonic() < deadline:
        changes += launcher.poll()
        time.sleep(0.05)
    (process,) = run.processes
    assert process.state == "failed" and process.returncode == 3
    final = [c for c in changes if c.new == "failed"]
    assert len(final) == 1 and final[0].returncode == 3
    assert "exit code 3" in final[0].message and "boom: out of memory" in final[0].message  # stderr is merged
    assert process.last_lines(2) == ["line 29", "boom: out of memory"]


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace(tmp_path: Path, launcher: Launcher) -> None:
    script = write_script(tmp_path, "stubborn.py", (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
        "while True:\n    time.sleep(0.1)\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=script, processes=1))
    (process,) = run.processes
    assert wait_for(lambda: "ready" in all_lines(process), launcher)
    began = time.monotonic()
    launcher.stop(run.run_id, grace_s=1.0)
    took = time.monotonic() - began
    assert process.state == "killed" and process.returncode == -9
    assert 0.9 <= took < 8.0, took
    assert not psutil.pid_exists(process.pid or -1) or psutil.Process(process.pid).status() == "zombie"


def test_graceful_stop_lets_a_process_clean_up(tmp_path: Path, launcher: Launcher) -> None:
    script = write_script(tmp_path, "polite.py", (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('saving checkpoint', flush=True)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.1)\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=script, processes=1))
    (process,) = run.processes
    assert wait_for(lambda: "ready" in all_lines(process), launcher)
    launcher.stop(run.run_id, grace_s=10.0)
    assert process.state == "exited" and process.returncode == 0
    assert "saving checkpoint" in all_lines(process)


def test_stop_reaches_children_in_their_own_session(tmp_path: Path, launcher: Launcher) -> None:
    # Like torchrun: the ranks run in sessions of their own, so signalling our group alone would orphan them.
    child = write_script(tmp_path, "child.py", (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)\n"))
    parent = write_script(tmp_path, "parent.py", (
        "import signal, subprocess, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"p = subprocess.Popen([sys.executable, {child!r}], start_new_session=True)\n"
        "print('child', p.pid, flush=True)\nwhile True:\n    time.sleep(0.1)\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=parent, processes=1))
    (process,) = run.processes
    assert wait_for(lambda: any(line.startswith("child ") for line in all_lines(process)), launcher)
    child_pid = int(next(line for line in all_lines(process) if line.startswith("child ")).split()[1])
    launcher.stop(run.run_id, grace_s=0.5)
    assert process.state == "killed"
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"


def test_a_child_started_while_the_stop_waits_is_not_left_running(tmp_path: Path, launcher: Launcher) -> None:
    # torchrun stopped while it was spawning a rank: the rank, in a session of its own, did not exist yet when the
    # stop looked for descendants, and the leader then exited; a sweep's clean-clone run left that rank training.
    child = write_script(tmp_path, "late_child.py", "import time\nwhile True:\n    time.sleep(0.1)\n")
    pid_file = tmp_path / "late_child.pid"
    parent = write_script(tmp_path, "late_parent.py", (
        "import signal, subprocess, sys, time\n"
        "stopped = []\nsignal.signal(signal.SIGTERM, lambda *_: stopped.append(1))\n"
        "print('ready', flush=True)\n"
        "while not stopped:\n    time.sleep(0.01)\n"
        f"p = subprocess.Popen([sys.executable, {child!r}], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "sys.exit(0)\n"))
    run = launcher.start(LaunchSpec(kind="script", trainer=parent, processes=1))
    (process,) = run.processes
    assert wait_for(lambda: "ready" in all_lines(process), launcher)
    launcher.stop(run.run_id, grace_s=5.0)
    assert process.state in ("killed", "exited")
    child_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != "zombie" \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"


def test_only_processes_of_this_machine_carry_a_stop_token() -> None:
    # Slurm passes the submitter's environment on to the job: a follower's token found the job's ranks on a node
    # that was also the submitter, and killed them under Slurm's own cancellation (the job ended 137, not cancelled)
    show = [sys.executable, "-c", "import os; print(os.environ.get('RINGSCOPE_PROCESS_TOKEN'), flush=True)"]
    tokens = []
    for local in (True, False):
        process = ManagedProcess(ProcessPlan("show", show, local=local), "token-run")
        deadline = time.monotonic() + 20
        while process.alive and time.monotonic() < deadline:
            process.update()
            time.sleep(0.05)
        tokens.append(all_lines(process)[-1])
    assert len(tokens[0]) == 32 and tokens[1] == "None"


def test_invalid_spec_is_refused_before_anything_starts(tmp_path: Path, launcher: Launcher) -> None:
    with pytest.raises(LaunchError) as caught:
        launcher.start(LaunchSpec(kind="script", trainer=str(tmp_path / "missing.py"), processes=1))
    assert "missing.py" in caught.value.errors[0] and launcher.runs == []


def test_rerun_starts_the_same_spec_under_a_new_run_id(tmp_path: Path, launcher: Launcher) -> None:
    script = write_script(tmp_path, "id.py", "import os\nprint(os.environ['RINGSCOPE_RUN_ID'])\n")
    first = launcher.start(LaunchSpec(kind="script", trainer=script, processes=1))
    second = launcher.rerun(first.run_id)
    assert wait_for(lambda: not first.alive and not second.alive, launcher)
    assert first.run_id != second.run_id
    assert all_lines(second.processes[0]) == [second.run_id] and all_lines(first.processes[0]) == [first.run_id]


# ---- The real reference trainer --------------------------------------------------------------------------------

class StepSink:
    """Collects Step / Event records received by the real collector (thread-safe enough: list.append)."""

    def __init__(self) -> None:
        self.steps: list[object] = []
        self.run_ids: set[str] = set()

    def on_batch(self, batch: object, recv_s: float) -> None:
        from ringscope.agent.schema import Hello, Step

        for record in batch.records:  # type: ignore[attr-defined]
            if isinstance(record, Step):
                self.steps.append(record)
            elif isinstance(record, Hello):
                self.run_ids.add(record.run_id)

    def on_gap(self, gap: object) -> None:
        pass

    def on_rejection(self, rejection: object) -> None:
        pass


@pytest.mark.slow
def test_real_ddp_reference_trainer_reports_steps_to_a_real_collector(tmp_path: Path) -> None:
    from ringscope.gui.core.ingest.collector import Collector

    sink = StepSink()
    collector = Collector("tcp://127.0.0.1:0", sinks=[sink]).start()
    launcher = Launcher(collector.endpoint)
    try:
        spec = LaunchSpec(kind="ddp", processes=2, env={"OMP_NUM_THREADS": "1"}, options={
            "steps": 12, "batch-size": 16, "model-width": 16, "slow-rank": 1, "slow-ms": 5, "device": "cpu",
            "checkpoint-dir": str(tmp_path / "ckpt"), "checkpoint-every-steps": 6})
        assert launcher.validate(spec) == []
        run = launcher.start(spec)
        assert wait_for(lambda: not run.alive, launcher, timeout_s=150), "\n".join(
            run.processes[0].last_lines(30))
        (torchrun,) = run.processes
        assert torchrun.state == "exited", torchrun.describe(lines=30)
        ranks = {step.rank for step in sink.steps}  # type: ignore[attr-defined]
        assert ranks == {0, 1}
        assert max(step.step for step in sink.steps) >= 11  # type: ignore[attr-defined]
        assert sink.run_ids == {run.run_id}  # the launcher's run id reached every agent
        assert any("RINGSCOPE_RESULT" in line for line in all_lines(torchrun))  # ranks' output reached the panel
        assert (tmp_path / "ckpt").is_dir()
    finally:
        launcher.kill()
        launcher.stop(grace_s=0.5)
        collector.close()


def test_demo_command_refuses_a_busy_collector_port(capsys: pytest.CaptureFixture[str]) -> None:
    from ringscope.gui.cli import main

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["demo", "--bind", f"tcp://127.0.0.1:{port}"]) == 2
    message = capsys.readouterr().err
    assert f"port {port} is in use" in message and "--bind" in message
    assert main(["demo", "--steps", "0"]) == 2
    assert "argument --steps: expected a whole number >= 1, got '0'" in capsys.readouterr().err
