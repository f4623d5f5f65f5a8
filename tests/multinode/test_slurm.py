"""Slurm launches from the launcher's Qt-free core, against a real Slurm: ``slurmctld`` on the master node and one
``slurmd`` per network-namespace test host (``tests.multinode.slurm``), a collector and recorder on the master's
address, the app's ``Launcher`` starting the follower that writes the batch script, ``sbatch``-es it and streams it.

- a 2-node x 2-rank DDP job and a 2-node MultiWorkerMirrored job are recorded with nothing lost, grouped by host,
  their job id in every agent's Hello;
- Stop on a running job is ``scancel``: no process of the run is left on any host;
- a job asking for a partition's only node while it is busy shows *queued (Resources)*, and Stop cancels it;
- a job past its time limit ends as *timeout*. Slurm's limits are whole minutes, checked every 30 s, so that job is
  submitted when the cluster starts and looked at by the module's last test, while the others run.

One cluster for the module (starting it takes a few seconds). Root needed (network namespaces).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.launch import Launcher, LaunchSpec
from ringscope.gui.core.launch.runner import Run
from ringscope.gui.core.launch.slurm import EXIT_CANCELLED, EXIT_TIMEOUT
from ringscope.gui.core.launch.slurm_settings import SlurmSettings
from tests.multinode.hosts import TestHosts, marked_processes, missing_requirements
from tests.multinode.slurm import SlurmCluster, missing_slurm

HOSTS = ("node-0", "node-1")
RANKS_PER_NODE = 2

_why = missing_requirements() or missing_slurm()
if _why and not os.environ.get("CI"):
    pytest.skip(f"Slurm tests need network namespaces and Slurm: {_why}", allow_module_level=True)


@dataclass
class Cluster:
    hosts: TestHosts
    slurm: SlurmCluster
    collector: Collector
    recorder: Recorder
    launcher: Launcher
    db: Path
    work: Path
    timeout_run: Run

    def spec(self, run_id: str, steps: int, nodes: int = 2, **changes: object) -> LaunchSpec:
        """The reference DDP trainer on ``nodes`` Slurm nodes, 2 ranks each."""
        fields: dict[str, object] = {
            "kind": "ddp", "processes": RANKS_PER_NODE, "run_id": run_id,
            "options": {"steps": steps, "log-every": 20}, "working_dir": str(self.work),
            "env": {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"},
            "slurm": SlurmSettings(nodes=nodes, partition="batch", time_limit="10"), **changes}
        return LaunchSpec(**fields)  # type: ignore[arg-type]

    def wait(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.launcher.poll()
            if condition():
                return True
            time.sleep(0.1)
        return False

    def recorded(self, expected: int) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (self.recorder.rows_written < expected
                                               or self.recorder.rows_written != self.collector.counters.records):
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("slurm-work")
    saved = os.environ.get("SLURM_CONF")
    with TestHosts(2) as hosts, SlurmCluster(hosts) as slurm:
        os.environ["SLURM_CONF"] = str(slurm.conf)  # what the follower's sbatch / scontrol / scancel read
        recorder = Recorder(work / "run.db").start()
        collector = Collector(f"tcp://{hosts.master_address}:0", [recorder]).start()
        launcher = Launcher(collector.endpoint)
        try:
            sleeper = work / "sleep_forever.py"
            sleeper.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(3600)\n")
            timeout_run = launcher.start(LaunchSpec(
                kind="script", trainer=str(sleeper), processes=1, run_id="slurm-timeout", working_dir=str(work),
                slurm=SlurmSettings(nodes=1, partition="batch", time_limit="1", extra=("--nodelist=node-1",))))
            yield Cluster(hosts, slurm, collector, recorder, launcher, work / "run.db", work, timeout_run)
        finally:
            launcher.kill()
            launcher.stop(grace_s=0.5)
            collector.close()
            recorder.close()
            if saved is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = saved


def job_id_of(run: Run) -> str:
    for line in run.processes[0].last_lines(2000):
        found = re.search(r"ringscope: submitted job (\d+)", line)
        if found:
            return found.group(1)
    raise AssertionError(run.processes[0].last_lines())


def left_on_hosts(cluster: Cluster, run_id: str) -> dict[str, list[int]]:
    found = {host: marked_processes(run_id, host) for host in HOSTS}
    return {host: pids for host, pids in found.items() if pids}


def test_ddp_job_on_two_nodes_is_recorded_with_ranks_grouped_by_host(cluster: Cluster) -> None:
    steps = 60
    run = cluster.launcher.start(cluster.spec("slurm-ddp", steps))
    follower = run.processes[0]
    assert follower.name == "slurm job" and "slurm_job" in " ".join(follower.plan.argv)
    assert cluster.wait(lambda: not run.alive, 300), follower.last_lines(200)
    lines = follower.last_lines(2000)
    assert (follower.state, follower.returncode) == ("exited", 0), lines
    job_id = job_id_of(run)
    said = [line for line in lines if line.startswith(f"ringscope: job {job_id} ")]
    assert said[-1] == f"ringscope: job {job_id} finished", said
    assert f"ringscope: job {job_id} running on node-[0-1]" in said, said
    assert any(line.startswith("step 40/") for line in lines), lines  # the job's own output, streamed
    script = next(Path(cluster.work, "ringscope-slurm").glob("slurm-ddp.attempt-*.sh")).read_text()
    assert "#SBATCH --nodes=2" in script and "torch.distributed.run" in script
    assert "\nexport RINGSCOPE_KEY" not in script

    cluster.recorded(2 * RANKS_PER_NODE * steps)
    data = load(cluster.db)
    agents = [hello for hello in data.agents if hello.run_id == "slurm-ddp"]
    host_of = {rank: hello.host for hello in agents for rank in hello.ranks}
    assert sorted(host_of.values()) == ["node-0", "node-0", "node-1", "node-1"], host_of
    assert host_of[0] == host_of[1] and host_of[2] == host_of[3]
    assert {hello.job_id for hello in agents} == {job_id}
    # the follower told the collector each state of the job: recorded with the run's attempts (the runs table's Slurm
    # state)
    said = [(note["event"], note["reason"], note["detail"]) for note in data.counters["attempts"]["slurm-ddp"]]
    assert said[-1] == ("scheduler", "finished", f"job {job_id} finished"), said
    assert ("scheduler", "running", f"job {job_id} running on node-[0-1]") in said, said
    run = data.for_run("slurm-ddp")
    for rank in range(4):
        assert run.steps_of(rank)["step"].astype(int).tolist() == list(range(steps))
    assert cluster.collector.counters.gaps == 0 and data.counters["dropped_by_agents"] == 0


def test_multi_worker_mirrored_job_on_two_nodes_is_recorded_with_one_worker_per_node(cluster: Cluster) -> None:
    steps = 30
    spec = cluster.spec("slurm-mwms", steps, kind="tf_multi_worker", processes=1,
                        options={"steps": steps, "log-every": 0},
                        env={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"})
    run = cluster.launcher.start(spec)
    assert cluster.wait(lambda: not run.alive, 300), run.processes[0].last_lines(200)
    assert run.ok, run.processes[0].last_lines(200)
    job_id = job_id_of(run)
    cluster.recorded(0)  # every record the collector accepted is written
    data = load(cluster.db).for_run("slurm-mwms")
    agents = [hello for hello in data.agents if hello.run_id == "slurm-mwms"]
    assert sorted(hello.host for hello in agents) == ["node-0", "node-1"]
    assert {hello.strategy for hello in agents} == {"multi_worker_mirrored"}
    assert {hello.host: hello.node_rank for hello in agents} == {"node-0": 0, "node-1": 1}  # SLURM_PROCID
    assert {hello.job_id for hello in agents} == {job_id}
    for rank in {rank for hello in agents for rank in hello.ranks}:
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(steps))
    assert cluster.collector.counters.gaps == 0


def test_stop_cancels_the_job_and_leaves_no_process_on_any_host(cluster: Cluster) -> None:
    run_id = "slurm-stop"
    rows = cluster.recorder.rows_written
    run = cluster.launcher.start(cluster.spec(run_id, 1_000_000))
    assert cluster.wait(lambda: cluster.recorder.rows_written >= rows + 4 * 5, 240), run.processes[0].last_lines()
    assert sorted(left_on_hosts(cluster, run_id)) == list(HOSTS)  # training on both nodes
    job_id = job_id_of(run)
    cluster.launcher.request_stop(run_id, grace_s=5)
    assert cluster.wait(lambda: not run.alive, 60), run.processes[0].last_lines()
    follower = run.processes[0]
    assert follower.returncode == EXIT_CANCELLED, follower.last_lines()
    assert f"ringscope: stopping: scancel {job_id}" in follower.last_lines(500)
    assert f"ringscope: job {job_id} cancelled" in follower.last_lines(500)
    assert cluster.slurm.squeue(job_id).startswith("CANCELLED")
    deadline = time.monotonic() + 15  # slurmd's KillWait (5 s) after SIGTERM at most
    while left_on_hosts(cluster, run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_on_hosts(cluster, run_id) == {}


def test_a_forced_kill_of_the_follower_still_cancels_the_job(cluster: Cluster) -> None:
    """Kill (Stop pressed twice, or the app going away hard) SIGKILLs the follower before it can scancel: the
    launcher cancels the run's jobs by their name instead."""
    sleeper = cluster.work / "sleep_forever.py"
    run = cluster.launcher.start(LaunchSpec(kind="script", trainer=str(sleeper), processes=1, run_id="slurm-kill",
                                            working_dir=str(cluster.work), zero_code=False,
                                            slurm=SlurmSettings(nodes=1, partition="batch", time_limit="10")))
    follower = run.processes[0]
    assert cluster.wait(lambda: "sleeping" in follower.last_lines(), 60), follower.last_lines()
    job_id = job_id_of(run)
    cluster.launcher.kill("slurm-kill")
    assert cluster.wait(lambda: not run.alive and all(not p.alive for p in run.stop_processes), 30)
    assert follower.returncode == -9 and [p.plan.argv for p in run.stop_processes] == [
        ["scancel", "--name=ringscope-slurm-kill"]]
    assert cluster.wait(lambda: cluster.slurm.squeue(job_id).startswith("CANCELLED"), 30), cluster.slurm.squeue(job_id)
    assert cluster.wait(lambda: left_on_hosts(cluster, "slurm-kill") == {}, 15)


def test_a_job_waiting_for_a_busy_node_shows_queued_with_its_reason(cluster: Cluster) -> None:
    blocker = subprocess.run(["sbatch", "--parsable", "--partition=solo", "--cpus-per-task=4",
                              f"--output={cluster.work / 'blocker.out'}", "--wrap", "sleep 300"],
                             capture_output=True, text=True, timeout=30, env=cluster.slurm.client_env())
    blocker_id = blocker.stdout.strip()
    assert blocker.returncode == 0 and blocker_id.isdigit(), blocker.stderr
    try:
        assert cluster.wait(lambda: cluster.slurm.squeue(blocker_id).startswith("RUNNING"), 30)
        run = cluster.launcher.start(cluster.spec("slurm-queued", 10, nodes=1, processes=1,
                                                  slurm=SlurmSettings(nodes=1, partition="solo")))
        follower = run.processes[0]
        assert cluster.wait(lambda: any(" queued (" in line for line in follower.last_lines()), 30), \
            follower.last_lines()
        job_id = job_id_of(run)
        assert f"ringscope: job {job_id} queued (Resources)" in follower.last_lines(), follower.last_lines()
        assert cluster.slurm.squeue(job_id) == "PENDING|Resources"
        cluster.launcher.request_stop("slurm-queued")
        assert cluster.wait(lambda: not run.alive, 30), follower.last_lines()
        assert follower.returncode == EXIT_CANCELLED
        assert cluster.slurm.squeue(job_id).startswith("CANCELLED")
        cluster.recorded(0)
        said = [(note["reason"], note["detail"]) for note in load(cluster.db).counters["attempts"]["slurm-queued"]]
        assert ("queued", f"job {job_id} queued (Resources)") in said and said[-1][0] == "cancelled", said
    finally:
        subprocess.run(["scancel", blocker_id], timeout=30, env=cluster.slurm.client_env(), check=False)


def test_ringscope_submit_follows_a_failing_job_to_its_exit_code(cluster: Cluster) -> None:
    """The command line: the user's script with the zero-code bootstrap, exit code 3 comes back as the job's."""
    script = cluster.work / "fails.py"
    script.write_text("import os, sys\nprint('job', os.environ['SLURM_JOB_ID'], 'attempt',"
                      " os.environ['RINGSCOPE_ATTEMPT'], flush=True)\nsys.exit(3)\n")
    done = subprocess.run(
        [sys.executable, "-m", "ringscope.gui.cli", "submit", "--endpoint", cluster.collector.endpoint,
         "--run-id", "slurm-cli", "--kind", "script", "--nodes", "1", "--tasks-per-node", "1", "--time", "5",
         "--", str(script)],
        capture_output=True, text=True, timeout=120, cwd=cluster.work, env=cluster.slurm.client_env())
    lines = done.stdout.splitlines()
    job_id = next(line.split()[3].rstrip(";") for line in lines if line.startswith("ringscope: submitted job"))
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"job {job_id} attempt 1" in lines, lines
    assert lines[-1] == f"ringscope: job {job_id} failed (exit code 3)", lines


def test_a_failed_slurm_job_is_resubmitted_as_the_next_attempt(cluster: Cluster) -> None:
    """The restart policy on Slurm resubmits: a new job per attempt, RINGSCOPE_ATTEMPT=k in it."""
    script = cluster.work / "fails_once.py"
    script.write_text("import os, sys\nattempt = int(os.environ['RINGSCOPE_ATTEMPT'])\n"
                      "print('attempt', attempt, 'in job', os.environ['SLURM_JOB_ID'], flush=True)\n"
                      "sys.exit(0 if attempt > 1 else 1)\n")
    run = cluster.launcher.start(LaunchSpec(
        kind="script", trainer=str(script), processes=1, run_id="slurm-restart", working_dir=str(cluster.work),
        zero_code=False, restart_max=1, slurm=SlurmSettings(nodes=1, partition="batch", time_limit="5")))
    assert cluster.wait(lambda: not run.alive, 120), run.processes[0].last_lines()
    assert run.supervisor is not None and run.ok, run.processes[0].last_lines()
    scripts = sorted(p.name for p in Path(cluster.work, "ringscope-slurm").glob("slurm-restart.attempt-*.sh"))
    assert scripts == ["slurm-restart.attempt-1.sh", "slurm-restart.attempt-2.sh"]
    lines = run.processes[0].last_lines(500)  # the second attempt's follower
    assert any(line.startswith("attempt 2 in job ") for line in lines), lines


def test_a_job_the_user_submitted_with_ringscope_run_inside_shows_up_with_its_job_id(cluster: Cluster) -> None:
    """Attaching: the user's own batch script, ``ringscope run`` in front of the training, plain ``sbatch``."""
    script = cluster.work / "own-job.sh"
    script.write_text("\n".join([
        "#!/bin/bash", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=batch",
        f"#SBATCH --output={cluster.work / 'own-job-%j.out'}", "set -euo pipefail",
        f"export PYTHONPATH={Path(__file__).resolve().parents[2]} OMP_NUM_THREADS=1",
        f"srun {sys.executable} -m ringscope.gui.cli run --endpoint {cluster.collector.endpoint} --run-id own-job -- "
        f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 1 -m ringscope.trainers.ddp_trainer "
        "--steps 5 --log-every 0", ""]))
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30,
                          cwd=cluster.work, env=cluster.slurm.client_env())
    job_id = done.stdout.strip()
    assert done.returncode == 0 and job_id.isdigit(), done.stderr
    assert cluster.wait(lambda: cluster.slurm.squeue(job_id).startswith(("COMPLETED", "FAILED")), 120)
    assert cluster.slurm.squeue(job_id).startswith("COMPLETED"), (
        cluster.work / f"own-job-{job_id}.out").read_text()
    cluster.recorded(cluster.recorder.rows_written)
    agents = [hello for hello in load(cluster.db).agents if hello.run_id == "own-job"]
    assert agents and {hello.job_id for hello in agents} == {job_id}
    info = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(cluster.db)], capture_output=True,
                          text=True, timeout=60)
    [run] = [run for run in json.loads(info.stdout)["runs"] if run["run_id"] == "own-job"]
    assert run["job_ids"] == [job_id] and len(run["hosts"]) == 1 and run["hosts"][0] in HOSTS, run


def test_a_job_past_its_time_limit_ends_as_timeout(cluster: Cluster) -> None:
    run = cluster.timeout_run
    follower = run.processes[0]
    # submitted with the cluster, limit 1 minute; slurmctld looks at limits every 30 s
    assert cluster.wait(lambda: not run.alive, 150), follower.last_lines()
    job_id = job_id_of(run)
    lines = follower.last_lines(500)
    assert "sleeping" in lines, lines
    assert lines[-1] == f"ringscope: job {job_id} timeout" or f"ringscope: job {job_id} timeout" in lines, lines
    assert follower.returncode == EXIT_TIMEOUT
    assert cluster.slurm.squeue(job_id).startswith("TIMEOUT")
    assert left_on_hosts(cluster, "slurm-timeout") == {}
