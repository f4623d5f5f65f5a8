"""A real Slurm cluster on the test hosts: ``munged`` and ``slurmctld`` on the master node, one ``slurmd`` per host.

    with TestHosts(2) as hosts, SlurmCluster(hosts) as cluster:
        env = cluster.client_env()                  # SLURM_CONF for sbatch / squeue / scancel on the master node
        subprocess.run(["sbatch", ...], env=env)

Debian's ``slurm-wlm`` (22.05) and ``munge``, as a cluster runs them, with nothing of the machine's own setup read or
changed: every file (munge key and socket, ``slurm.conf``, state, spool, logs) lives in one short temporary folder
(a Unix socket path is limited to 107 bytes), found through ``SLURM_CONF`` and ``AuthInfo=socket=``.

- ``slurmctld`` runs in the master's network namespace (it listens on the bridge address every host reaches) with
  its own hostname ``master``, the name ``SlurmctldHost`` gives it.
- Host ``i`` runs ``slurmd -N node-<i>`` in its namespace: node ``node-<i>`` at the host's address. The hosts share
  this machine's file system, as a cluster's nodes share their home and project folders.
- Partitions: ``batch`` (every node, the default) and ``solo`` (node-0 only: a job asking for it waits while it is
  busy, *queued* with reason ``Resources``).
- No cgroups (``proctrack/linuxproc``, ``task/none``) and no accounting database: ``sacct`` has nothing, and a job's
  end state is read from ``squeue --states=all`` while slurmctld keeps it (``MinJobAge``, 300 s), as Ringscope's
  follower falls back to.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.multinode.hosts import TestHosts

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "srun")
CPUS_PER_NODE = 4  # what each node offers to jobs (config_overrides: the hosts share this machine's cores)
# ``ip netns exec`` mounts a fresh /sys for the namespace, where /sys/fs/cgroup is empty, and slurmd 22.05 will not
# start without a cgroup file system (whatever its plugins). In the host's own mount namespace this mounts the
# machine's cgroup v1 hierarchies again (the same hierarchies, not new ones), as /sys/fs/cgroup holds them outside.
_CGROUP_MOUNTS = (
    "mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && "
    "for c in $(awk '!/^#/ && $4 == 1 {print $1}' /proc/cgroups); do "
    "mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || true; done && "
    "mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd")


def missing_slurm() -> str | None:
    """Why a Slurm cluster cannot be started here, or None (the daemons and client commands are installed)."""
    for daemon in DAEMONS:
        if not os.path.exists(daemon):
            return f"{daemon} is missing (apt-get install slurmctld slurmd slurm-client munge)"
    for tool in CLIENTS:
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (apt-get install slurm-client)"
    return None


class SlurmCluster:
    """munged + slurmctld here, slurmd on every host of ``hosts``; ``close`` (or the ``with`` block) stops them."""

    def __init__(self, hosts: TestHosts) -> None:
        self.hosts = hosts
        self.directory = Path(tempfile.mkdtemp(prefix="rsslurm"))
        self.conf = self.directory / "slurm.conf"
        self.munge_socket = self.directory / "munge.socket"
        self._daemons: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def node(self, host: int) -> str:
        return self.hosts.hostname(host)

    def client_env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster (what the client commands read)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        """Write the key and configuration, start the daemons, and wait until every node is idle. A cluster that
        does not come up is stopped again (nothing left running), and the error names the daemons' last log lines."""
        try:
            return self._start(timeout_s)
        except BaseException:
            self.close()
            raise

    def _start(self, timeout_s: float) -> SlurmCluster:
        key = self.directory / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        os.chmod(self.directory, 0o755)
        self._daemons.append(subprocess.Popen(
            ["/usr/sbin/munged", "--foreground", "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
             f"--pid-file={self.directory / 'munged.pid'}", f"--log-file={self.directory / 'munged.log'}",
             f"--seed-file={self.directory / 'munged.seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        _wait_for(lambda: self.munge_socket.exists(), timeout_s, "munged did not create its socket")
        ctld_port, slurmd_port = _free_port(), _free_port()
        (self.directory / "state").mkdir()
        self.conf.write_text(self._slurm_conf(ctld_port, slurmd_port))
        self._daemons.append(subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", 'hostname master && exec "$@"', "slurmctld",
             "/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=self.client_env()))
        for host in range(self.hosts.count):
            (self.directory / f"spool-{self.node(host)}").mkdir()
            self._daemons.append(self.hosts.popen(
                host, ["sh", "-c", _CGROUP_MOUNTS + ' && exec "$@"', "slurmd",
                       "/usr/sbin/slurmd", "-D", "-N", self.node(host), "-f", str(self.conf)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.client_env()))
        _wait_for(self._all_idle, timeout_s, "the Slurm nodes did not become idle", self._log_tail)
        return self

    def close(self) -> None:
        """Stop the daemons (slurmd first, then slurmctld and munged) and whatever jobs left on the hosts."""
        for daemon in reversed(self._daemons):
            if daemon.poll() is None:
                try:
                    os.killpg(daemon.pid, 9)
                except ProcessLookupError:
                    pass
                daemon.wait(timeout=10)
        self._daemons.clear()
        self.hosts.kill_remaining()
        shutil.rmtree(self.directory, ignore_errors=True)

    def squeue(self, job_id: str) -> str:
        """``STATE|REASON`` of a job as slurmctld has it now (empty when it is unknown)."""
        done = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%r"], capture_output=True,
                              text=True, timeout=30, env=self.client_env())
        return done.stdout.strip()

    # ---- Internals ----------------------------------------------------------------------------------------------

    def _slurm_conf(self, ctld_port: int, slurmd_port: int) -> str:
        d = self.directory
        nodes = [f"NodeName={self.node(i)} NodeAddr={self.hosts.address(i)} CPUs={CPUS_PER_NODE} State=UNKNOWN"
                 for i in range(self.hosts.count)]
        everyone = ",".join(self.node(i) for i in range(self.hosts.count))
        return "\n".join([
            "ClusterName=ringscope-test",
            f"SlurmctldHost=master({self.hosts.master_address})",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool-%n'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "SwitchType=switch/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides", "ReturnToService=2",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5", "MinJobAge=300",
            "MessageTimeout=20",
            *nodes,
            f"PartitionName=batch Nodes={everyone} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=solo Nodes={self.node(0)} MaxTime=INFINITE State=UP",
            ""])

    def _all_idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=30,
                              env=self.client_env())
        states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
        return len(states) == self.hosts.count and all(state == "idle" for state in states.values())

    def _log_tail(self) -> str:
        parts = []
        for log in sorted(self.directory.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-8:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def _wait_for(condition: Any, timeout_s: float, what: str, details: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout_s:g} s" + (f"\n{details()}" if details else ""))
        time.sleep(0.2)
