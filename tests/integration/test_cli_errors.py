"""Every command, every bad input: one line on stderr naming the argument, exit code 2 (1 where a command ran but
failed), no traceback, no temporary file names, and nothing created or half-written.

Most cases run ``ringscope.gui.cli.main`` in this process (the console script's entry point, without paying a process
start per case); the few that need a process of their own (the console script's real exit code, a simulator that forks,
Qt's platform check with another environment) run ``ringscope`` as a subprocess.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from ringscope.agent.simulate import run_cluster
from ringscope.gui.cli import main
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.ingest.recorder import Recorder

PROCESS_TIMEOUT_S = 60
UNWRITABLE = Path("/sys/ringscope-test")  # sysfs refuses to create files even for root; a ENOTDIR case is below


def _ringscope() -> list[str]:
    script = Path(sys.executable).with_name("ringscope")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ringscope.gui.cli"]


def _qt_xcb_missing() -> list[str]:
    """What the dynamic loader cannot find for Qt's xcb plugin, by ``ldd`` (an oracle independent of the code)."""
    import PySide6

    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    if shutil.which("ldd") is None or not plugin.exists():
        return []
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=30, check=False).stdout
    return sorted({line.split()[0] for line in out.splitlines() if "not found" in line})


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    says: tuple[str, ...]
    """Substrings of the one meaningful stderr line: the argument and what is accepted (or what failed)."""
    code: int = 2
    process: bool = False
    env: dict[str, str | None] = field(default_factory=dict)
    """Environment changes (None removes a variable)."""
    needs: Callable[[], str | None] | None = None
    """Returns why the case cannot run here (skip), or None."""


def _needs_missing_xcb() -> str | None:
    return None if _qt_xcb_missing() else "every library of Qt's xcb plugin is installed here"


S = "{session}"
CASES: dict[str, Case] = {
    # prices: positive finite numbers
    "compare-price-negative": Case(("compare", S, S, "--html", "{tmp}/c.html", "--price-per-gpu-hour", "-1"),
                                   ("--price-per-gpu-hour", "> 0", "'-1'")),
    "compare-price-inf": Case(("compare", S, S, "--html", "{tmp}/c.html", "--price-per-gpu-hour", "inf"),
                              ("--price-per-gpu-hour", "'inf'")),
    "report-price-nan": Case(("report", S, "--html", "{tmp}/r.html", "--price-per-gpu-hour", "nan"),
                             ("--price-per-gpu-hour", "'nan'")),
    "report-price-zero": Case(("report", S, "--html", "{tmp}/r.html", "--price-per-gpu-hour", "0"),
                              ("--price-per-gpu-hour", "> 0")),
    # Slurm submissions: checked before anything is written or submitted
    "submit-nodes-zero": Case(("submit", "--nodes", "0", "--", "{file}"), ("--nodes", ">= 1", "'0'")),
    "submit-endpoint-not-one": Case(("submit", "--endpoint", "nowhere", "--", "{file}"), ("--endpoint", "'nowhere'")),
    "submit-loopback-collector": Case(("submit", "--endpoint", "tcp://127.0.0.1:5757", "--time", "an hour", "--",
                                       "{file}"), ("loopback", "Slurm's nodes cannot reach", "time limit 'an hour'")),
    # output paths: under a regular file (ENOTDIR), folder for file, file for folder, existing session
    "record-out-under-a-file": Case(("record", "--out", "{file}/S.db"), ("--out", "is a file, not a folder")),
    "keys-key-file-under-a-file": Case(("keys", "--key-file", "{file}/k.json"), ("--key-file", "not a folder")),
    "report-html-under-a-file": Case(("report", S, "--html", "{file}/r.html"), ("--html", "not a folder")),
    "report-pdf-deep-under-a-file": Case(("report", S, "--pdf", "{file}/a/b/r.pdf"), ("--pdf", "not a folder")),
    "report-trace-under-a-file": Case(("report", S, "--trace", "{file}/t.json"), ("--trace", "not a folder")),
    "report-csv-is-a-file": Case(("report", S, "--csv", "{file}"), ("--csv", "is a file; give a folder")),
    "report-html-is-a-folder": Case(("report", S, "--html", "{tmp}"), ("--html", "is a folder")),
    "compare-pdf-is-a-folder": Case(("compare", S, S, "--html", "{tmp}/c.html", "--pdf", "{tmp}"),
                                    ("--pdf", "is a folder")),
    "compare-html-under-a-file": Case(("compare", S, S, "--html", "{file}/c.html"), ("--html", "not a folder")),
    "record-out-exists": Case(("record", "--out", S), ("--out", "already exists")),
    "window-record-exists": Case(("window", "--record", S), ("--record", "already exists")),
    "demo-record-under-a-file": Case(("demo", "--record", "{file}/d.db"), ("--record", "not a folder")),
    "window-key-file-under-a-file": Case(("window", "--secure", "--key-file", "{file}/k.json"),
                                         ("--key-file", "not a folder")),
    # writes that fail after the checks: the option and the reason, never a temporary file's name
    "report-html-unwritable": Case(("report", S, "--html", f"{UNWRITABLE.parent}/r.html"), ("cannot write --html",)),
    "report-csv-unwritable": Case(("report", S, "--csv", f"{UNWRITABLE}/csv"), ("cannot write --csv",)),
    "compare-html-unwritable": Case(("compare", S, S, "--html", f"{UNWRITABLE}/c.html"), ("--html", "cannot")),
    "keys-key-file-unwritable": Case(("keys", "--key-file", f"{UNWRITABLE}/k.json"), ("cannot write --key-file",)),
    # endpoints: syntax, port ranges, busy ports
    "record-bind-port-too-big": Case(("record", "--out", "{tmp}/S.db", "--bind", "tcp://127.0.0.1:99999"),
                                     ("--bind", "0..65535", "'99999'")),
    "record-bind-not-an-endpoint": Case(("record", "--out", "{tmp}/S.db", "--bind", "foo"),
                                        ("--bind", "tcp://HOST:PORT", "'foo'")),
    "record-bind-busy": Case(("record", "--out", "{tmp}/S.db", "--bind", "tcp://127.0.0.1:{busy}"),
                             ("--bind", "address in use")),
    "window-bind-not-an-endpoint": Case(("window", "--bind", "foo"), ("--bind", "tcp://HOST:PORT", "'foo'")),
    "window-bind-busy": Case(("window", "--bind", "tcp://127.0.0.1:{busy}"), ("--bind", "port {busy} is in use")),
    "window-bind-foreign-address": Case(("window", "--bind", "tcp://192.0.2.1:5757"),
                                        ("--bind", "cannot bind tcp://192.0.2.1:5757")),
    "demo-bind-port-too-big": Case(("demo", "--bind", "tcp://*:70000"), ("--bind", "0..65535")),
    "demo-bind-busy": Case(("demo", "--bind", "tcp://127.0.0.1:{busy}"), ("--bind", "port {busy} is in use")),
    "simulate-endpoint-not-an-endpoint": Case(("simulate", "--ranks", "2", "--endpoint", "foo"),
                                              ("--endpoint", "tcp://HOST:PORT", "'foo'")),
    "simulate-endpoint-port-0": Case(("simulate", "--ranks", "2", "--endpoint", "tcp://127.0.0.1:0"),
                                     ("--endpoint", "1..65535")),
    "simulate-endpoint-from-env": Case(("simulate", "--ranks", "2", "--steps", "1"),
                                       ("$RINGSCOPE_ENDPOINT", "'nonsense'", "--endpoint"),
                                       env={"RINGSCOPE_ENDPOINT": "nonsense"}),
    # durations > 0, counts >= 1, other numbers
    "record-duration-negative": Case(("record", "--out", "{tmp}/S.db", "--duration", "-3"),
                                     ("--duration", "seconds > 0", "'-3'")),
    "record-progress-nan": Case(("record", "--out", "{tmp}/S.db", "--progress-s", "nan"), ("--progress-s", "'nan'")),
    "record-agent-flush-too-long": Case(("record", "--out", "{tmp}/S.db", "--agent-flush", "5"),
                                        ("--agent-flush", "outside 0.01..1 s")),
    "simulate-processes-0": Case(("simulate", "--ranks", "2", "--processes", "0"), ("--processes", ">= 1", "'0'")),
    "simulate-ranks-0": Case(("simulate", "--ranks", "0"), ("--ranks", ">= 1")),
    "simulate-ranks-not-a-number": Case(("simulate", "--ranks", "four"), ("--ranks", "'four'")),
    "simulate-duration-0": Case(("simulate", "--ranks", "2", "--duration", "0"), ("--duration", "> 0")),
    "simulate-rate-too-high": Case(("simulate", "--ranks", "2", "--steps-per-second", "1e9"),
                                   ("--steps-per-second", "10000")),
    "simulate-data-stall-negative": Case(("simulate", "--ranks", "2", "--data-stall", "-1"), ("--data-stall", ">= 0")),
    "simulate-straggler-malformed": Case(("simulate", "--ranks", "2", "--straggler", "1:-5"),
                                         ("--straggler", "RANK:MS", "'1:-5'")),
    "simulate-straggler-outside": Case(("simulate", "--ranks", "4", "--straggler", "4:10"),
                                       ("--straggler", "rank 4 does not exist", "0..3")),
    "simulate-timeout-negative": Case(("simulate", "--ranks", "2", "--connect-timeout", "-1"),
                                      ("--connect-timeout", ">= 0")),
    "window-simulate-0": Case(("window", "--simulate", "0"), ("--simulate", ">= 1")),
    "demo-steps-0": Case(("demo", "--steps", "0"), ("--steps", ">= 1")),
    # missing or unusable inputs, nothing asked for, unknown commands
    "record-without-out": Case(("record",), ("--out", "required")),
    "report-without-session": Case(("report",), ("SESSION.db", "required")),
    "report-nothing-to-write": Case(("report", S), ("nothing to write", "--html FILE")),
    "compare-nothing-to-write": Case(("compare", S, S), ("nothing to write", "--html FILE")),
    "report-missing-session": Case(("report", "{tmp}/none.db", "--html", "{tmp}/new/r.html"), ("none.db",)),
    "compare-missing-session": Case(("compare", S, "{tmp}/none.db", "--html", "{tmp}/new/c.html"), ("none.db",)),
    "info-on-a-folder": Case(("info", "{tmp}"), ("is a directory",)),
    "info-on-a-text-file": Case(("info", "{file}"), ("not a Ringscope session",)),
    "unknown-command": Case(("reprot", "x.db"), ("unknown command 'reprot'", "did you mean 'report'",
                                                  "commands: window, demo, open, record")),
    "default-command-bad-bind": Case(("--bind", "foo"), ("ringscope window: argument --bind", "'foo'")),
    "default-command-bad-simulate": Case(("-v", "--simulate", "-2"), ("ringscope window: argument --simulate",)),
    "unknown-option": Case(("info", "x.db", "--htlm", "r.html"), ("unrecognized arguments: --htlm",)),
    # in a process of its own: the console script's exit code, a fail-fast simulator, Qt's platform check
    "process-compare-price": Case(("compare", S, S, "--html", "{tmp}/c.html", "--price-per-gpu-hour", "-1"),
                                  ("--price-per-gpu-hour",), process=True),
    "process-unknown-command": Case(("reprot",), ("unknown command",), process=True),
    "process-simulate-no-collector": Case(
        ("simulate", "--ranks", "2", "--duration", "60", "--connect-timeout", "1", "--endpoint",
         "tcp://127.0.0.1:{closed}"), ("FAILED: nothing delivered", "within 1 s"), code=1, process=True),
    "process-window-qt-libraries-missing": Case(
        ("window",), ("Qt cannot open a window", "apt-get install"), process=True,
        env={"DISPLAY": ":99", "QT_QPA_PLATFORM": None, "WAYLAND_DISPLAY": None}, needs=_needs_missing_xcb),
    "process-window-no-display": Case(("window",), ("no display", "xvfb-run"), process=True,
                                      env={"DISPLAY": None, "QT_QPA_PLATFORM": None, "WAYLAND_DISPLAY": None}),
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recorded session: 2 simulated ranks, 10 steps, through collector and recorder."""
    path = tmp_path_factory.mktemp("session") / "S.db"
    recorder = Recorder(path).start()
    collector = Collector("tcp://127.0.0.1:0", sinks=[recorder]).start()
    try:
        run_cluster(2, endpoint=collector.endpoint, steps_per_second=50, steps=10, processes=0)
        deadline = time.monotonic() + 10
        while collector.counters.records < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        collector.close()
        recorder.close()
    return path


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port another process (here: a plain socket) listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(case: Case, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, str]:
    if not case.process:
        for name, value in case.env.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        code = main(argv)
        return code, capsys.readouterr().err
    env = dict(os.environ)
    for name, value in case.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    with subprocess.Popen([*_ringscope(), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"ringscope {' '.join(argv)} did not finish within {PROCESS_TIMEOUT_S} s: {err[-2000:]}")
    return proc.returncode, err


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_exit_code(name: str, tmp_path: Path, session: Path, busy_port: int,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    if case.needs is not None and (reason := case.needs()):
        pytest.skip(reason)
    (tmp_path / "afile").write_text("a regular file, not a folder\n")
    values = {"tmp": str(tmp_path), "file": str(tmp_path / "afile"), "session": str(session),
              "busy": str(busy_port), "closed": str(_closed_port())}
    argv = [arg.format(**values) for arg in case.argv]
    before, session_before = _tree(tmp_path), session.read_bytes()

    code, err = _run(case, argv, monkeypatch, capsys)

    lines = [line for line in err.splitlines() if line.strip()]
    assert code == case.code, err
    assert "Traceback" not in err
    if case.code == 2:
        assert len(lines) == 1, err
        meaningful = lines[0]
    else:
        failed = [line for line in lines if "FAILED" in line]
        assert len(failed) == 1, err
        meaningful = failed[0]
    assert meaningful.startswith("ringscope"), meaningful
    for expected in case.says:
        assert expected.format(**values) in meaningful, meaningful
    for arg in argv:  # temporary files are named ".<target name>.<random>"
        assert f".{Path(arg).name}." not in err, err
    assert _tree(tmp_path) == before, "a failed command left files or folders behind"
    assert session.read_bytes() == session_before
    assert not UNWRITABLE.exists()


def test_simulate_exits_1_when_a_simulator_process_dies() -> None:
    """A killed rank process stops the simulated cluster and the command says which ranks died (exit 1)."""
    collector = Collector("tcp://127.0.0.1:0", sinks=[]).start()
    proc = subprocess.Popen([*_ringscope(), "simulate", "--ranks", "4", "--processes", "2", "--duration", "60",
                             "--endpoint", collector.endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        children: list[psutil.Process] = []
        while time.monotonic() < deadline and (collector.counters.agents < 4 or len(children) < 2):
            time.sleep(0.1)
            children = psutil.Process(proc.pid).children()
        assert collector.counters.agents == 4 and len(children) == 2, "the simulator never started its ranks"
        victim = children[1]
        victim.kill()
        _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
        collector.close()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1, err
    assert f"simulator process {victim.pid} (ranks 2..3) was killed by SIGKILL" in failed[0]


def test_every_output_creates_its_missing_folders(session: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One rule for every output: missing parent folders are created (and a session file is never replaced)."""
    out = tmp_path / "new"
    assert main(["report", str(session), "--html", f"{out}/a/r.html", "--pdf", f"{out}/b/r.pdf", "--csv",
                 f"{out}/c/csv", "--trace", f"{out}/d/t.json"]) == 0
    assert main(["compare", str(session), str(session), "--html", f"{out}/e/c.html"]) == 0
    assert main(["keys", "--key-file", f"{out}/f/k.json"]) == 0
    assert main(["record", "--out", f"{out}/g/S.db", "--bind", "tcp://127.0.0.1:0", "--duration", "0.1",
                 "--progress-s", "0"]) == 0
    capsys.readouterr()
    for path in ("a/r.html", "b/r.pdf", "c/csv/steps.csv", "d/t.json", "e/c.html", "f/k.json", "g/S.db"):
        assert (out / path).is_file() and (out / path).stat().st_size > 0, path
    assert not [p for p in out.rglob(".*")], "temporary files left behind"
