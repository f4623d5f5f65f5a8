"""An SSH server on every test host (``TestHosts``), reachable from the master node by the hosts' names.

    with TestHosts(2) as hosts, SshServers(hosts, tmp_path) as servers:
        spec = LaunchSpec(hosts=("node-0", "node-1"), ssh_key=str(servers.client_key),
                          ssh_options=servers.client_options, ...)

Each host runs ``/usr/sbin/sshd -D`` in its namespace (so its sessions get the host's network, hostname and
``/etc/hosts``), listening on the host's address only, with a host key and an ``authorized_keys`` made here for this
test: nothing of the machine's own SSH setup is read or changed. The client side is an ssh config file (``-F``) that
maps ``node-<i>`` to the host's address (the master's /etc/hosts does not know the test hosts) and keeps known host
keys in the temporary folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.multinode.hosts import TestHosts

SSHD = "/usr/sbin/sshd"


def missing_sshd() -> str | None:
    """Why SSH servers cannot be started here, or None (sshd, ssh and ssh-keygen installed)."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (apt-get install openssh-client)"
    return None


class SshServers:
    """sshd on every host of ``hosts``; files in ``directory``. ``close`` (or the ``with`` block) stops them."""

    def __init__(self, hosts: TestHosts, directory: Path) -> None:
        self.hosts = hosts
        self.directory = directory
        self.client_key = directory / "client_ed25519"
        self.known_hosts = directory / "known_hosts"
        self.client_config = directory / "ssh_config"
        self._servers: list[subprocess.Popen[Any]] = []

    @property
    def client_options(self) -> tuple[str, ...]:
        """ssh arguments that reach the hosts by name with this test's known-hosts file."""
        return ("-F", str(self.client_config))

    def __enter__(self) -> SshServers:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self, timeout_s: float = 15.0) -> SshServers:
        """Make the keys and configs, start sshd on every host and wait until each accepts connections."""
        self.directory.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        host_key = self.directory / "host_ed25519"
        for key in (host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
        authorized = self.directory / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        client_lines = []
        for i in range(self.hosts.count):
            config = self.directory / f"sshd_config_{i}"
            config.write_text("\n".join([
                f"ListenAddress {self.hosts.address(i)}", "Port 22", f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}", f"PidFile {self.directory / f'sshd_{i}.pid'}",
                "UsePAM no", "PermitRootLogin prohibit-password", "StrictModes no", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "LogLevel ERROR", ""]))
            self._servers.append(self.hosts.popen(i, [SSHD, "-D", "-e", "-f", str(config)],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            client_lines += [f"Host {self.hosts.hostname(i)}", f"    HostName {self.hosts.address(i)}"]
        client_lines += ["Host *", f"    UserKnownHostsFile {self.known_hosts}", "    LogLevel ERROR", ""]
        self.client_config.write_text("\n".join(client_lines))
        for i in range(self.hosts.count):
            self._wait_listening(self.hosts.address(i), timeout_s)
        return self

    def close(self, timeout_s: float = 10.0) -> list[int]:
        """Stop every sshd started here and whatever still runs in the hosts' namespaces (sessions, and what they
        started); returns the pids that were left and killed. Idempotent.

        sshd's sessions, and what they start, run in sessions of their own: out of reach of the process-group
        kill of ``TestHosts.close`` (which sweeps the namespaces as well, the same way).
        """
        for server in self._servers:
            if server.poll() is None:
                server.kill()  # the namespace wrapper execs sshd: this is sshd itself
                server.wait(timeout=10)
        self._servers.clear()
        return self.hosts.kill_remaining(timeout_s)

    def _wait_listening(self, address: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((address, 22), timeout=1.0):
                    return
            except OSError:
                if time.monotonic() > deadline or any(s.poll() is not None for s in self._servers):
                    raise RuntimeError(f"sshd on {address} did not start listening within {timeout_s} s") from None
                time.sleep(0.1)

