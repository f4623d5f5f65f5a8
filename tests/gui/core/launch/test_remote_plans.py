"""Multi-node launch specs without a cluster: persistence, validation, the ssh argv and remote shell line (run here
by a real ``sh``), and the remote stop code (run here against real processes)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringscope.gui.core.launch import LaunchSpec, build_commands, validate
from ringscope.gui.core.launch.remote import (
    STOP_CODE,
    WATCHDOG_CODE,
    check_host,
    host_port,
    remote_shell_command,
    remote_stop_plans,
)

ENDPOINT = "tcp://10.0.0.1:5757"
HOSTS = ("node-0", "node-1")


def remote_words(argv: list[str]) -> list[str]:
    """The words the remote shell runs (the last ssh argument, split as the remote shell would)."""
    return shlex.split(argv[-1])


def ddp_spec(**changes: object) -> LaunchSpec:
    fields: dict[str, object] = {"kind": "ddp", "processes": 2, "hosts": HOSTS, "run_id": "run-7",
                                 "options": {"steps": 5}, **changes}
    return LaunchSpec(**fields)  # type: ignore[arg-type]


# ---- Persistence -------------------------------------------------------------------------------------------------

def test_hosts_and_ssh_settings_survive_a_round_trip_and_old_saves_load_as_local() -> None:
    spec = ddp_spec(ssh_user="alice", ssh_key="~/.ssh/id_cluster", ssh_options=("-o", "Port=2222"))
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["hosts"] == list(HOSTS)
    back = LaunchSpec.from_dict(data)
    assert (back.hosts, back.ssh_user, back.ssh_key, back.ssh_options) == (
        HOSTS, "alice", "~/.ssh/id_cluster", ("-o", "Port=2222"))
    old = {key: value for key, value in data.items() if key not in ("hosts", "ssh_user", "ssh_key", "ssh_options")}
    local = LaunchSpec.from_dict(old)
    assert local.hosts == () and local.ssh_user is None and not local.remote
    assert "on each of 2 hosts (node-0, node-1)" in spec.title()


# ---- Validation --------------------------------------------------------------------------------------------------

def test_a_valid_multi_node_spec_has_no_errors() -> None:
    assert validate(ddp_spec(), ENDPOINT) == []
    assert validate(ddp_spec(kind="tf_multi_worker", options={}, base_port=40000), ENDPOINT) == []


@pytest.mark.parametrize(("host", "words"), [
    ("-oProxyCommand=touch /tmp/x", "contains spaces"),
    ("-oProxyCommand=x", "not a valid host name"),
    ("alice@node-0", "SSH user field"),
    ("node-0:2222", "a port does not go into the host name"),
    ("", "empty"),
    ("node_0.cluster", None),
    ("10.1.2.3", None),
    ("fd00::1", None),
])
def test_host_names_are_checked_before_they_reach_ssh(host: str, words: str | None) -> None:
    message = check_host(host)
    if words is None:
        assert message is None
    else:
        assert message is not None and words in message


def test_multi_node_refusals_say_what_to_change(tmp_path: Path) -> None:
    errors = validate(ddp_spec(kind="tf_mirrored", options={}), ENDPOINT)
    assert any("cannot run on several hosts" in e and "MultiWorkerMirroredStrategy" in e for e in errors), errors
    errors = validate(ddp_spec(hosts=("node-0", "node-0")), ENDPOINT)
    assert any("listed twice" in e for e in errors), errors
    errors = validate(ddp_spec(ssh_user="-x", ssh_key=str(tmp_path / "missing")), ENDPOINT)
    assert any("SSH user '-x'" in e for e in errors) and any("SSH key" in e and "not found" in e for e in errors)
    errors = validate(ddp_spec(), "tcp://127.0.0.1:5757")
    assert any("loopback" in e and "--bind tcp://0.0.0.0:PORT" in e for e in errors), errors
    assert validate(ddp_spec(hosts=()), "tcp://127.0.0.1:5757") == []  # local runs use the loopback as before
    errors = validate(ddp_spec(processes=600), ENDPOINT)
    assert any("make 1200, more than 1024" in e for e in errors), errors


# ---- Plans -------------------------------------------------------------------------------------------------------

def test_ddp_gives_one_ssh_client_per_host_running_torchrun_with_a_c10d_rendezvous_on_the_first(
        tmp_path: Path) -> None:
    key = tmp_path / "key"
    plans = build_commands(ddp_spec(ssh_user="alice", ssh_key=str(key), ssh_options=("-o", "Port=2222"),
                                    working_dir=str(tmp_path), env={"GLOO_SOCKET_IFNAME": "eth0"}),
                           ENDPOINT, {"RINGSCOPE_KEY": "secret"})
    assert [plan.name for plan in plans] == list(HOSTS)
    for index, plan in enumerate(plans):
        argv = plan.argv
        # user options first (ssh keeps the first value of an option), then the launcher's, key, destination
        assert argv[:3] == ["ssh", "-o", "Port=2222"] and "BatchMode=yes" in argv
        assert "StrictHostKeyChecking=accept-new" in argv and argv[argv.index("-i") + 1] == str(key)
        assert argv[-3:-1] == ["--", f"alice@{HOSTS[index]}"]
        words = remote_words(argv)
        assert words[:5] == ["cd", str(tmp_path), "||", "exit", "1;"]
        # the host's watchdog runs the command (see test_remote_watchdog)
        assert words[5:13] == ["exec", sys.executable, "-c", WATCHDOG_CODE, "run-7", HOSTS[index], "5", "env"]
        assert {f"RINGSCOPE_HOST={HOSTS[index]}", "RINGSCOPE_RUN_ID=run-7", f"RINGSCOPE_ENDPOINT={ENDPOINT}",
                "PYTHONUNBUFFERED=1", "RINGSCOPE_KEY=secret", "GLOO_SOCKET_IFNAME=eth0"} <= set(words)
        torchrun = words[words.index(sys.executable, 7):]
        assert torchrun[:13] == [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
                                 "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node-0:29400", "--rdzv-id",
                                 "run-7"]
        assert torchrun[-4:] == ["-m", "ringscope.trainers.ddp_trainer", "--steps", "5"]


def test_tf_multi_worker_lists_every_host_in_tf_config_with_the_host_position_as_task_index() -> None:
    spec = ddp_spec(kind="tf_multi_worker", options={}, hosts=("node-0", "fd00::2"), processes=1, base_port=40000)
    configs = []
    for plan in build_commands(spec, ENDPOINT):
        words = remote_words(plan.argv)
        configs.append(json.loads(next(w for w in words if w.startswith("TF_CONFIG="))[len("TF_CONFIG="):]))
        assert words[-2:] == ["--strategy", "multi_worker_mirrored"]
    assert [c["cluster"]["worker"] for c in configs] == [["node-0:40000", "[fd00::2]:40000"]] * 2
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert host_port("fd00::2", 1) == "[fd00::2]:1"


def test_several_processes_per_host_run_together_and_the_first_failure_is_the_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    # one write per line: the two copies share the output pipe, unbuffered
    script.write_text("import os, sys\nsys.stdout.write(f\"{os.environ['RANK']} {os.environ['RINGSCOPE_HOST']} "
                      "{os.getcwd()}\\n\")\nsys.exit(int(os.environ['LOCAL_RANK']) * 3)\n")
    spec = ddp_spec(kind="script", trainer=str(script), options={}, processes=2, working_dir=str(tmp_path),
                    zero_code=False)
    plans = build_commands(spec, ENDPOINT)
    watched = remote_words(plans[1].argv)
    assert watched[-3:-1] == ["sh", "-c"]  # the watchdog runs one shell that runs the host's processes
    words = shlex.split(watched[-1])
    assert [w for w in words if w.startswith(("RANK=", "WORLD_SIZE=", "NODE_RANK=", "MASTER_ADDR="))] == [
        "RANK=2", "WORLD_SIZE=4", "NODE_RANK=1", "MASTER_ADDR=node-0", "RANK=3", "WORLD_SIZE=4", "NODE_RANK=1",
        "MASTER_ADDR=node-0"]
    # what sshd would do with it: the login shell runs the line
    done = subprocess.run(["sh", "-c", plans[1].argv[-1]], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"2 node-1 {tmp_path}", f"3 node-1 {tmp_path}"]
    missing = subprocess.run(["sh", "-c", remote_shell_command([(["true"], {})], str(tmp_path / "nope"))],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "nope" in missing.stderr


# ---- Remote stop -------------------------------------------------------------------------------------------------

@pytest.fixture
def marked() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three sleepers: run-7 on node-0 (one ignores SIGTERM), and run-7 on node-1."""
    started: list[subprocess.Popen[bytes]] = []

    def start(host: str, ignore_term: bool) -> None:
        code = ("import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
                + "print('ready', flush=True)\ntime.sleep(60)\n")
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                   env={**os.environ, "RINGSCOPE_RUN_ID": "run-7", "RINGSCOPE_HOST": host})
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        started.append(process)

    start("node-0", False)
    start("node-0", True)
    start("node-1", False)
    yield started
    for process in started:
        process.kill()
        process.wait(timeout=10)


def test_the_stop_code_ends_the_runs_processes_of_one_host_only_and_forces_what_ignores_sigterm(
        marked: list[subprocess.Popen[bytes]]) -> None:
    plans = remote_stop_plans(ddp_spec(), grace_s=0.5)
    assert [plan.name for plan in plans] == ["stop node-0", "stop node-1"]
    words = remote_words(plans[0].argv)
    assert words == [sys.executable, "-c", STOP_CODE, "run-7", "node-0", "0.5"]
    started = time.monotonic()
    done = subprocess.run(words, capture_output=True, text=True, timeout=30)  # what the host would run
    assert done.returncode == 0, done.stderr
    assert "2 process(es) of run run-7 sent SIGTERM, 1 SIGKILL" in done.stdout
    assert time.monotonic() - started < 5
    for process in marked[:2]:
        process.wait(timeout=5)
    assert [marked[0].returncode, marked[1].returncode] == [-signal.SIGTERM, -signal.SIGKILL]
    assert marked[2].poll() is None  # node-1's process is not node-0's to stop
