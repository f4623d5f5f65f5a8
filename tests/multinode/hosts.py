"""Test hosts on one Linux machine: network namespaces joined by veth pairs to a bridge, each with its own address
and hostname, for multi-node trainings without a cluster.

    with TestHosts(2) as hosts:                        # root only (network namespaces, a bridge, tc)
        hosts.popen(0, ["torchrun", ...], env=...)     # runs inside host 0's namespace, hostname "node-0"
        hosts.shape(1, "2mbit")                        # host 1's link rate-limited (tc tbf)

The machine itself (the root namespace) is the master node: it holds the bridge and its address
(``hosts.master_address``), so a collector bound there is reached by every host, as ``RINGSCOPE_ENDPOINT`` on a
cluster's master node is. Host ``i`` lives in namespace ``rs<pid>-h<i>`` with interface ``eth0`` at
``hosts.address(i)``; a private /24 (10.213.x.0) derived from the pid keeps concurrent runs apart. Each command runs
in its own UTS namespace with hostname ``node-<i>``, so ranks on different hosts do not all report the machine's name.

Everything is removed on every exit path (``close``, the ``with`` block, interpreter exit, SIGTERM/SIGINT in the
command-line form); namespaces left by a process that was SIGKILLed are removed by the next ``TestHosts`` (their pid no
longer exists). The names derive from the pid, so every ``TestHosts`` of one process uses the same ones: ``close``
kills whatever still runs in the namespaces and returns only once the links, namespaces and bridge are gone (the
kernel frees a deleted namespace's links asynchronously, so the links are deleted explicitly), and ``open`` removes
leftovers with its names first; whatever ran before, each one starts from a clean slate. A user can run the same
thing by hand:

    sudo python -m tests.multinode.hosts --hosts 2 [--shape 1=2mbit]   # prints the addresses, Ctrl-C removes them
    sudo python -m tests.multinode.hosts --cleanup                      # remove leftovers of killed runs

``tc netem`` is not in every kernel (``sch_netem`` is missing on these machines); ``shape`` uses ``tbf`` (rate).
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringscope.gui.core.launch.remote import stop_marker
from ringscope.gui.core.launch.spec import LaunchSpec

PREFIX = "rs"
_NAMESPACE = re.compile(rf"^{PREFIX}(\d+)-h\d+$")
_BRIDGE = re.compile(rf"^{PREFIX}br(\d+)$")


class HostsError(RuntimeError):
    """The test hosts could not be set up (not root, no ``ip``, a kernel without network namespaces)."""


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise HostsError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def missing_requirements() -> str | None:
    """Why test hosts cannot be made here, or None when they can (root, iproute2, unshare, tc)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (apt-get install iproute2 util-linux)"
    return None


def cleanup_stale() -> list[str]:
    """Remove the namespaces and bridges of ``TestHosts`` whose process is gone; returns what was removed."""
    removed: list[str] = []
    listing = _ip("netns", "list", check=False).stdout.split()
    for name in listing:
        match = _NAMESPACE.match(name)
        if match and not _alive(int(match.group(1))):
            _ip("netns", "del", name, check=False)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
            removed.append(name)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip() if len(parts) > 1 else ""
        match = _BRIDGE.match(name)
        if match and not _alive(int(match.group(1))):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


class TestHosts:
    """``count`` hosts as network namespaces on one bridge; see the module docstring."""

    __test__ = False  # a helper, not a pytest class

    def __init__(self, count: int = 2) -> None:
        if not 1 <= count <= 8:
            raise ValueError(f"count must be 1..8, got {count}")
        self.count = count
        self.pid = os.getpid()
        third = self.pid % 250 + 1
        self.subnet = f"10.213.{third}"
        self.master_address = f"{self.subnet}.1"
        self.bridge = f"{PREFIX}br{self.pid}"
        self.namespaces = [f"{PREFIX}{self.pid}-h{i}" for i in range(count)]
        # this machine's end of each host's veth pair (at most 15 characters: an interface name's limit)
        self.links = [f"{PREFIX}v{self.pid % 100000}x{i}" for i in range(count)]
        self._processes: list[subprocess.Popen[Any]] = []
        self._up = False

    # ---- Lifecycle ---------------------------------------------------------------------------------------------------

    def __enter__(self) -> TestHosts:
        self.open()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def open(self) -> TestHosts:
        """Create the bridge, the namespaces and their links (removing leftovers of killed runs first)."""
        why = missing_requirements()
        if why:
            raise HostsError(why)
        cleanup_stale()
        self.kill_remaining()  # leftovers with these names: a TestHosts of this process that did not close
        self._remove()
        atexit.register(self.close)
        self._up = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.master_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            hosts_file = "127.0.0.1\tlocalhost\n" + "".join(
                f"{self.address(i)}\t{self.hostname(i)}\n" for i in range(self.count))
            hosts_file += f"{self.master_address}\tmaster\n"
            for i, netns in enumerate(self.namespaces):
                # `ip netns exec` bind-mounts /etc/netns/<name>/* over /etc: each host resolves every host's name
                # (torchrun's c10d rendezvous looks its own hostname up)
                etc = Path("/etc/netns") / netns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text(hosts_file)
                outside = self.links[i]
                _ip("netns", "add", netns)
                _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", netns)
                _ip("link", "set", outside, "master", self.bridge)
                _ip("link", "set", outside, "up")
                _ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", netns=netns)
                _ip("link", "set", "eth0", "up", netns=netns)
                _ip("link", "set", "lo", "up", netns=netns)
        except Exception:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every command started here, kill whatever else still runs in the hosts (an sshd's sessions and what
        they started), and remove the namespaces, links and bridge; returns once they are gone (idempotent)."""
        for process in self._processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    process.kill()
                process.wait(timeout=30)
        self._processes.clear()
        if not self._up:
            return
        self._up = False
        atexit.unregister(self.close)
        self.kill_remaining()
        self._remove()

    def kill_remaining(self, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL every process still in the hosts' namespaces until none is left (at most ``timeout_s``); returns
        the pids killed. A namespace outlives ``ip netns del`` while a process is still in it."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = [pid for netns in self.namespaces for pid in _netns_pids(netns)]
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return killed

    def _remove(self, timeout_s: float = 15.0) -> None:
        # The links are deleted first and explicitly: that frees both ends' names at once, where deleting the
        # namespace frees them only when the kernel's cleanup gets to it ("File exists" for the next TestHosts).
        for link in self.links:
            _ip("link", "del", link, check=False)
        for netns in self.namespaces:
            _ip("netns", "del", netns, check=False)
            shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
        deadline = time.monotonic() + timeout_s
        while left := self._existing():
            if time.monotonic() > deadline:
                raise HostsError(f"test hosts not removed after {timeout_s:g} s: {', '.join(left)} still exist; "
                                 "remove them with `ip link del NAME` / `ip netns del NAME`")
            time.sleep(0.1)

    def _existing(self) -> list[str]:
        """The links, bridge and namespaces of these hosts that exist now."""
        listed = set(_ip("netns", "list", check=False).stdout.split())
        links = [name for name in [*self.links, self.bridge]
                 if _ip("link", "show", name, check=False).returncode == 0]
        return links + [netns for netns in self.namespaces if netns in listed]

    # ---- Use ---------------------------------------------------------------------------------------------------------

    def address(self, host: int) -> str:
        """Host ``host``'s address on the bridge."""
        return f"{self.subnet}.{10 + host}"

    def hostname(self, host: int) -> str:
        return f"node-{host}"

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside host ``host``: its namespace, its own UTS namespace and hostname."""
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname(host), *argv]

    def popen(self, host: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on host ``host`` in a new process group (``close`` kills the group)."""
        process = subprocess.Popen(self.command(host, argv), start_new_session=True, **kwargs)
        self._processes.append(process)
        return process

    def shape(self, host: int, rate: str, burst: str = "16kbit", latency: str = "2000ms") -> None:
        """Rate-limit what host ``host`` sends (``tc qdisc ... tbf``): a slow link."""
        argv = ["ip", "netns", "exec", self.namespaces[host], "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                "rate", rate, "burst", burst, "latency", latency]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise HostsError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def _netns_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=10)
    return [int(pid) for pid in done.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def marked_processes(run_id: str, host: str) -> list[int]:
    """Processes (on this machine: the test hosts share its pid space) whose environment marks them as ``run_id``'s
    on ``host``, as the remote stop finds them."""
    marks = {f"{key}={value}".encode() for key, value in stop_marker(LaunchSpec(run_id=run_id), host).items()}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marks <= set(Path(f"/proc/{name}/environ").read_bytes().split(b"\0")):
                    found.append(int(name))
            except OSError:
                pass
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.multinode.hosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2, help="number of hosts (1..8, default 2)")
    parser.add_argument("--shape", action="append", default=[], metavar="HOST=RATE",
                        help="rate-limit a host's link, e.g. 1=2mbit (repeatable)")
    parser.add_argument("--cleanup", action="store_true", help="only remove leftovers of killed runs, then exit")
    args = parser.parse_args(argv)
    why = missing_requirements()
    if why:
        print(f"hosts: {why}", file=sys.stderr)
        return 2
    if args.cleanup:
        removed = cleanup_stale()
        print("removed: " + (", ".join(removed) if removed else "nothing"))
        return 0
    hosts = TestHosts(args.hosts)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # atexit and the with block clean up
    with hosts:
        for spec in args.shape:
            host, _, rate = spec.partition("=")
            hosts.shape(int(host), rate)
        print(f"master node (this machine's namespace): {hosts.master_address} on {hosts.bridge}")
        for i in range(hosts.count):
            print(f"host {i}: {hosts.address(i)}  run a command there: "
                  f"ip netns exec {hosts.namespaces[i]} unshare --uts sh -c 'hostname node-{i}; exec bash'")
        print("Ctrl-C removes them.", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
