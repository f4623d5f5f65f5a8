"""Multi-node launches over SSH from the master node, for real: an sshd on each test host, the app's ``Launcher``
starting one ``ssh`` client per host, a collector and recorder on the master node's address.

A 2-host x 2-rank torchrun DDP run is recorded with ranks grouped by host and nothing lost, both hosts' output
streamed through the ssh clients; Stop in the middle of a run ends every process of the run on both hosts (found
by the run id in their environment, whatever their command line); the launching side gone (its ssh clients
SIGKILLed) ends the run on both hosts too, by the watchdog each host runs it under; a 2-host
MultiWorkerMirroredStrategy run gets TF_CONFIG across the hosts with each host's position as its worker index. Root
needed (network namespaces, sshd).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.launch import Launcher, LaunchSpec
from tests.multinode.hosts import TestHosts, marked_processes, missing_requirements
from tests.multinode.recording import ROOT
from tests.multinode.sshd import SshServers, missing_sshd

RANKS_PER_HOST = 2
STEPS = 60
HOSTS = ("node-0", "node-1")

_why = missing_requirements() or missing_sshd()
if _why and not os.environ.get("CI"):
    pytest.skip(f"SSH launch tests need network namespaces and sshd: {_why}", allow_module_level=True)


@dataclass
class Cluster:
    hosts: TestHosts
    servers: SshServers
    collector: Collector
    recorder: Recorder
    launcher: Launcher
    db: Path

    def spec(self, run_id: str, steps: int, **changes: object) -> LaunchSpec:
        """The reference DDP trainer on both hosts, 2 ranks each, over this test's ssh setup."""
        fields: dict[str, object] = {
            "kind": "ddp", "processes": RANKS_PER_HOST, "hosts": HOSTS, "run_id": run_id,
            "options": {"steps": steps, "log-every": 20}, "working_dir": str(ROOT),
            "env": {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"},
            "ssh_key": str(self.servers.client_key), "ssh_options": self.servers.client_options,
            **changes}
        return LaunchSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with TestHosts(2) as hosts, SshServers(hosts, tmp_path / "ssh") as servers:
        recorder = Recorder(tmp_path / "run.db").start()
        collector = Collector(f"tcp://{hosts.master_address}:0", [recorder]).start()
        launcher = Launcher(collector.endpoint)
        try:
            yield Cluster(hosts, servers, collector, recorder, launcher, tmp_path / "run.db")
        finally:
            launcher.kill()  # teardown: the run ends on both hosts even when an assertion failed
            launcher.stop(grace_s=0.5)
            collector.close()
            recorder.close()


def wait_for(condition: Callable[[], bool], launcher: Launcher, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        launcher.poll()
        if condition():
            return True
        time.sleep(0.1)
    return False


def namespace_of(pid: int) -> str:
    done = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True, timeout=10)
    return done.stdout.strip()


def pgrep_in(namespace: str, pattern: str) -> list[str]:
    done = subprocess.run(["ip", "netns", "exec", namespace, "pgrep", "-af", pattern], capture_output=True,
                          text=True, timeout=10)
    return done.stdout.splitlines()


def test_ddp_on_two_hosts_over_ssh_is_recorded_with_ranks_grouped_by_host(cluster: Cluster) -> None:
    spec = cluster.spec("ssh-ddp", STEPS)
    spec.env["LOGLEVEL"] = "INFO"  # each host's torchrun says which ranks it started
    run = cluster.launcher.start(spec)
    assert [p.name for p in run.processes] == list(HOSTS)
    assert all(p.plan.argv[0] == "ssh" for p in run.processes)
    assert wait_for(lambda: not run.alive, cluster.launcher, 300), [p.last_lines() for p in run.processes]
    outputs = {p.name: p.last_lines(200) for p in run.processes}
    assert [(p.state, p.returncode) for p in run.processes] == [("exited", 0), ("exited", 0)], outputs
    assert run.ok
    # both hosts' output came back through their ssh client, line by line
    assert any(line.startswith("step 40/") for line in outputs["node-0"]), outputs  # rank 0 lives on node-0
    assert any("RINGSCOPE_RESULT" in line for line in outputs["node-0"]), outputs
    for host in HOSTS:
        assert any("Rendezvous complete" in line for line in outputs[host]), outputs[host]
    started = {line.split("global_ranks=")[1] for host in HOSTS for line in outputs[host] if "global_ranks=" in line}
    assert started == {"[0, 1]", "[2, 3]"}, outputs

    expected = 2 * RANKS_PER_HOST * STEPS
    recorder, collector = cluster.recorder, cluster.collector
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (recorder.rows_written < expected
                                           or recorder.rows_written != collector.counters.records):
        time.sleep(0.1)
    assert collector.counters.gaps == 0
    data = load(cluster.db)
    assert data.ranks == [0, 1, 2, 3]
    host_of = {rank: hello.host for hello in data.agents for rank in hello.ranks}
    assert sorted(host_of.values()) == ["node-0", "node-0", "node-1", "node-1"]
    assert host_of[0] == host_of[1] and host_of[2] == host_of[3]
    for rank in range(4):
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(STEPS))
    assert data.counters["gaps"] == 0 and data.counters["dropped_by_agents"] == 0


def test_stop_mid_run_ends_the_run_on_both_hosts(cluster: Cluster) -> None:
    run_id = "ssh-stop"
    run = cluster.launcher.start(cluster.spec(run_id, 1_000_000))
    # training for real on both hosts: steps recorded, and every rank's process marked with its host
    assert wait_for(lambda: cluster.recorder.rows_written >= 4 * 5, cluster.launcher, 240), \
        [p.last_lines() for p in run.processes]
    for index, host in enumerate(HOSTS):
        pids = marked_processes(run_id, host)
        assert len(pids) >= 1 + RANKS_PER_HOST, (host, pids)  # torchrun and its ranks
        assert {namespace_of(pid) for pid in pids} == {cluster.hosts.namespaces[index]}
        assert pgrep_in(cluster.hosts.namespaces[index], run_id)  # torchrun carries the run id as --rdzv-id

    started = time.monotonic()
    cluster.launcher.stop(run_id, grace_s=5)
    took_s = time.monotonic() - started
    assert not run.alive and took_s < 5 + 6, took_s
    for index, host in enumerate(HOSTS):
        assert marked_processes(run_id, host) == [], host
        assert pgrep_in(cluster.hosts.namespaces[index], run_id) == [], host
    assert [p.state for p in run.processes] == ["killed", "killed"], [p.describe() for p in run.processes]
    stops = {p.name: p for p in run.stop_processes}
    assert sorted(stops) == ["stop node-0", "stop node-1"]
    for name, stop in stops.items():
        assert (stop.state, stop.returncode) == ("exited", 0), stop.describe()
        assert any("sent SIGTERM" in line for line in stop.last_lines()), (name, stop.last_lines())


def test_killing_the_ssh_clients_ends_the_run_on_both_hosts_within_10_s(cluster: Cluster) -> None:
    run_id = "ssh-gone"
    # a quiet training: one that prints would also die of the broken pipe at its next line, watchdog or not
    run = cluster.launcher.start(cluster.spec(run_id, 1_000_000, options={"steps": 1_000_000, "log-every": 0}))
    assert wait_for(lambda: cluster.recorder.rows_written >= 4 * 5, cluster.launcher, 240), \
        [p.last_lines() for p in run.processes]
    for host in HOSTS:
        assert len(marked_processes(run_id, host)) >= 1 + RANKS_PER_HOST, host  # torchrun and its ranks

    def remaining() -> dict[str, list[str]]:
        """Per host, what still carries the run id: in its environment (ranks) or command line (torchrun)."""
        found = {host: [f"{pid} (marked)" for pid in marked_processes(run_id, host)] for host in HOSTS}
        for index, host in enumerate(HOSTS):
            found[host] += pgrep_in(cluster.hosts.namespaces[index], run_id)
        return {host: lines for host, lines in found.items() if lines}

    killed = time.monotonic()
    for process in run.processes:
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)  # the ssh client alone: as when the app dies, nothing is sent to a host
    left = remaining()
    while left and time.monotonic() - killed < 10:
        time.sleep(0.05)
        left = remaining()
    took_s = time.monotonic() - killed
    print(f"\n{took_s:.2f} s after its ssh clients were SIGKILLed the run " + (
        "had ended on both hosts" if not left else f"still had processes: {left}"))
    assert left == {}, (took_s, left)
    assert wait_for(lambda: not run.alive, cluster.launcher, 10)
    assert [p.returncode for p in run.processes] == [-signal.SIGKILL] * 2
    assert run.stop_processes == []  # the hosts stopped it by themselves: no stop command was sent


def test_multi_worker_mirrored_on_two_hosts_over_ssh_is_recorded_with_one_worker_per_host(cluster: Cluster) -> None:
    steps = 40
    spec = cluster.spec("ssh-mwms", steps, kind="tf_multi_worker", processes=1, base_port=29610,
                        options={"steps": steps, "log-every": 0},
                        env={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"})
    run = cluster.launcher.start(spec)
    assert wait_for(lambda: not run.alive, cluster.launcher, 300), [p.last_lines() for p in run.processes]
    assert run.ok, [p.describe() for p in run.processes]
    recorder, collector = cluster.recorder, cluster.collector
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (recorder.rows_written < 2 * steps
                                           or recorder.rows_written != collector.counters.records):
        time.sleep(0.1)
    data = load(cluster.db)
    host_of = {rank: hello.host for hello in data.agents for rank in hello.ranks}
    assert sorted(host_of.values()) == ["node-0", "node-1"]
    assert {h.strategy for h in data.agents} == {"multi_worker_mirrored"}
    assert {h.host: h.node_rank for h in data.agents} == {"node-0": 0, "node-1": 1}  # TF_CONFIG index: position
    for rank in host_of:
        assert data.steps_of(rank)["step"].astype(int).tolist() == list(range(steps))
    assert data.counters["gaps"] == 0 and collector.counters.gaps == 0
