"""The Slurm batch script, its checks and the scheduler's words, without a cluster (tests/multinode/test_slurm.py
submits them to a real one)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.slurm import (
    EXIT_CANCELLED,
    EXIT_TIMEOUT,
    JobState,
    batch_script,
    parse_job_id,
    parse_sacct,
    parse_scontrol,
)
from ringscope.gui.core.launch.slurm_settings import SlurmSettings
from ringscope.gui.core.launch.spec import LaunchSpec
from ringscope.gui.core.launch.validation import validate

ENDPOINT = "tcp://10.0.0.1:5757"


def spec(tmp_path: Path, **changes: object) -> LaunchSpec:
    fields: dict[str, object] = {"kind": "ddp", "processes": 2, "run_id": "r1", "working_dir": str(tmp_path),
                                 "slurm": SlurmSettings(nodes=2, partition="gpu", time_limit="1:00:00",
                                                        account="team", gpus_per_node=8, extra=("--mem=64G",)),
                                 **changes}
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def test_the_ddp_script_asks_for_what_the_user_set_and_is_valid_bash(tmp_path: Path) -> None:
    text = batch_script(spec(tmp_path), ENDPOINT, {"RINGSCOPE_KEY": "s3cret-token"})
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --time=1:00:00", "#SBATCH --account=team", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --mem=64G", f"export RINGSCOPE_ENDPOINT={ENDPOINT}", "export RINGSCOPE_RUN_ID=r1"):
        assert line in text.splitlines(), line
    assert "s3cret-token" not in text  # the token travels in sbatch's environment, never in the file
    assert '--rdzv-endpoint "$RINGSCOPE_HEAD_NODE:29400"' in text and "--nproc-per-node 2" in text
    assert 'export RINGSCOPE_HOST="$SLURMD_NODENAME"' in text
    checked = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_the_multi_worker_script_builds_tf_config_from_the_allocation(tmp_path: Path) -> None:
    """The script's own bash, run with the variables Slurm sets: every task gets the same cluster and its index."""
    text = batch_script(spec(tmp_path, kind="tf_multi_worker", processes=2), ENDPOINT)
    assert "#SBATCH --ntasks-per-node=2" in text
    # the part before srun, with scontrol replaced by the allocation's node names, then each task's TF_CONFIG
    head = text.split("\nsrun ")[0].replace('$(scontrol show hostnames "$SLURM_JOB_NODELIST")', "gpu-a gpu-b")
    head = head.replace("set -euo pipefail", "set -uo pipefail")
    configs = []
    for procid in range(4):
        probe = head + "\nringscope_task() { :; }\n" + \
            "\n".join(line.strip() for line in text.splitlines() if line.strip().startswith("export TF_CONFIG"))
        done = subprocess.run(["bash", "-c", probe + '\necho "$TF_CONFIG"'], capture_output=True, text=True,
                              env={"SLURM_PROCID": str(procid), "PATH": "/usr/bin:/bin"}, timeout=30)
        assert done.returncode == 0, done.stderr
        configs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert {json.dumps(c["cluster"]) for c in configs} == {json.dumps(
        {"worker": ["gpu-a:29610", "gpu-a:29611", "gpu-b:29610", "gpu-b:29611"]})}
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(4)]


def test_a_launch_on_slurm_is_one_follower_with_the_script_in_its_environment(tmp_path: Path) -> None:
    [plan] = build_commands(spec(tmp_path), ENDPOINT, {"RINGSCOPE_KEY": "k"})
    assert plan.name == "slurm job" and plan.argv[1:3] == ["-m", "ringscope.gui.core.launch.slurm_job"]
    assert plan.env["RINGSCOPE_BATCH_SCRIPT"].startswith("#!/bin/bash") and plan.env["RINGSCOPE_KEY"] == "k"
    assert plan.argv[-1] == str(tmp_path / "ringscope-slurm")


@pytest.mark.parametrize(("changes", "says"), [
    ({"slurm": SlurmSettings(nodes=0)}, "Slurm nodes 0 is out of range"),
    ({"slurm": SlurmSettings(time_limit="an hour")}, "time limit 'an hour' is not one of Slurm's forms"),
    ({"slurm": SlurmSettings(partition="gpu; rm -rf /")}, "partition 'gpu; rm -rf /' is not a valid name"),
    ({"slurm": SlurmSettings(extra=("mem 64G",))}, "is not an sbatch option"),
    ({"slurm": SlurmSettings(extra=("--nodes=4",))}, "sets what Ringscope sets itself"),
    ({"slurm": SlurmSettings(extra=("#SBATCH -N 4",))}, "sets what Ringscope sets itself"),  # short forms too
    ({"slurm": SlurmSettings(extra=("-o/tmp/x.out",))}, "sets what Ringscope sets itself"),
    ({"slurm": SlurmSettings(extra=("-J mine",))}, "sets what Ringscope sets itself"),
    ({"slurm": SlurmSettings(extra=("--ntasks 8",))}, "sets what Ringscope sets itself"),
    ({"kind": "tf_mirrored", "slurm": SlurmSettings(nodes=2)}, "MirroredStrategy runs on one node"),
    ({"hosts": ("a", "b")}, "clear the hosts list"),
])
def test_bad_slurm_settings_are_refused_with_a_sentence(tmp_path: Path, changes: dict[str, object],
                                                        says: str) -> None:
    errors = validate(spec(tmp_path, **changes), ENDPOINT)
    assert any(says in error for error in errors), errors


def test_a_loopback_collector_is_refused_for_slurm_nodes(tmp_path: Path) -> None:
    errors = validate(spec(tmp_path), "tcp://127.0.0.1:5757")
    assert any("Slurm's nodes cannot reach" in error for error in errors), errors


def test_settings_survive_the_recent_list(tmp_path: Path) -> None:
    original = spec(tmp_path)
    again = LaunchSpec.from_dict(json.loads(json.dumps(original.to_dict())))
    assert again.slurm == original.slurm and again.slurm is not None and again.slurm.extra == ("--mem=64G",)
    assert LaunchSpec.from_dict(LaunchSpec(kind="ddp").to_dict()).slurm is None


def test_scheduler_states_in_ringscope_words() -> None:
    line = ("JobId=7 JobName=x JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 "
            "NodeList=(null) BatchHost=(null)")
    pending = parse_scontrol("7", line)
    assert pending is not None and pending.describe() == "queued (Resources)" and not pending.final
    running = parse_scontrol("7", line.replace("PENDING", "RUNNING").replace("Resources", "None")
                             .replace("NodeList=(null)", "NodeList=node-[0-1]"))
    assert running is not None and running.describe() == "running on node-[0-1]"
    assert JobState("7", "COMPLETED", exit_code="0:0").exit_status() == 0
    failed = JobState("7", "FAILED", exit_code="3:0")
    assert (failed.describe(), failed.exit_status()) == ("failed (exit code 3)", 3)
    assert JobState("7", "NODE_FAIL").describe() == "failed (NODE_FAIL)"
    assert JobState("7", "TIMEOUT").exit_status() == EXIT_TIMEOUT
    assert JobState("7", "CANCELLED by 0").describe() == "cancelled"
    assert JobState("7", "CANCELLED by 0").exit_status() == EXIT_CANCELLED
    assert parse_scontrol("7", "slurm_load_jobs error: Invalid job id specified") is None
    done = parse_sacct("7", "COMPLETED|None|node-0|0:0\n")
    assert done is not None and done.word == "finished"
    assert parse_job_id("1234\n") == "1234" and parse_job_id("99;cluster") == "99" and parse_job_id("") is None


def test_the_process_panel_reads_the_jobs_state_from_the_followers_lines() -> None:
    from ringscope.gui.core.launch.slurm import job_state_line

    assert job_state_line("ringscope: job 41 queued (Resources)") == "job 41 queued (Resources)"
    assert job_state_line("ringscope: job 41 running on node-[0-1]") == "job 41 running on node-[0-1]"
    assert job_state_line("ringscope: job 41 failed (exit code 3)") == "job 41 failed (exit code 3)"
    assert job_state_line("ringscope: submitted job 41; its output: x.out") is None
    assert job_state_line("step 20/60 ringscope: job 41 finished") is None  # the job's own output is not a state


def test_the_follower_copies_the_jobs_output_in_whole_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ringscope.gui.core.launch.slurm_job import _Follower

    output = tmp_path / "job.out"
    follower = _Follower("7", output, "r1", 1)
    follower.copy_output()  # the job has not started: no file yet, nothing printed
    output.write_text("step 1\nstep 2\nhalf a li")
    follower.copy_output()
    assert capsys.readouterr().out == "step 1\nstep 2\n"
    with output.open("a") as stream:
        stream.write("ne\nlast words")
    follower.copy_output(final=True)  # the job ended: its last line comes even without a newline
    assert capsys.readouterr().out == "half a line\nlast words\n"


def test_extra_sbatch_options_that_only_look_like_ours_are_accepted(tmp_path: Path) -> None:
    extra = ("--nodelist=node[1-2]", "-c 8", "--ntasks-per-core=1", "#SBATCH --nice=10", "--exclusive")
    settings = SlurmSettings(extra=extra)
    assert validate(spec(tmp_path, slurm=settings), ENDPOINT) == []
