"""What users install: the wheel built from this tree, in a fresh virtual environment, without extras.

The editable install of ``make setup`` hides packaging mistakes (setuptools' editable finder maps names whatever is
on ``sys.path``), so these tests build the wheel with ``python -m build`` from a copy of the tree, install it into a
new venv with the agent-side dependencies only, add the pinned CPU torch (from pip's local wheels and cache: seconds),
and use it as a training node would: no Qt, the ``ringscope`` command, ``import ringscope.agent``, and zero-code
instrumentation of a user project that has its own ``agent``, ``gui`` and ``trainers`` packages.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
USER_PROJECT = Path(__file__).resolve().parent / "user_project"
STEPS = 30
QT_DISTRIBUTIONS = ("pyside6", "pyside6-essentials", "shiboken6", "pyqtgraph")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def ringscope(self) -> str:
        return str(self.venv / "bin" / "ringscope")

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``argv`` in a user's shell, away from this checkout (its folders would be importable from its root)."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, env=_clean_env(),
                              cwd=self.venv)


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing of this checkout or of Ringscope's own test run."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RINGSCOPE_", "PYTHON", "VIRTUAL_ENV")) and k != "PYTEST_CURRENT_TEST"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _source_copy(target: Path) -> Path:
    """The tree as a clean clone has it (no venv, caches or earlier build/ folder whose stale files would ship)."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
                                    "docs", "tests", "benchmarks", "*.db*")
    shutil.copytree(ROOT, target, symlinks=True, ignore=ignore)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    source = _source_copy(work / "source")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work / "dist"),
                            str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("ringscope-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    for argv in ([*pip, str(wheel)], [*pip, "-c", str(ROOT / "constraints" / "cpu.txt"), "torch"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=_clean_env())
        assert done.returncode == 0, done.stderr[-3000:]
    return Installed(wheel, venv)


def test_the_wheel_holds_one_top_level_package(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
        top_level = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt")))
        names = set(wheel.namelist())
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ringscope"}
    assert top_level.decode().split() == ["ringscope"]
    for expected in ("ringscope/agent/inject/startup/sitecustomize.py", "ringscope/gui/cli.py",
                     "ringscope/trainers/ddp_trainer.py", "ringscope/resources/report/uPlot.iife.min.js",
                     "ringscope/resources/styles/light.qss"):
        assert expected in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]


def test_a_training_node_install_has_no_qt_and_the_headless_commands(installed: Installed) -> None:
    listed = installed.run(installed.python, "-m", "pip", "list", "--format", "json")
    distributions = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "ringscope" in distributions
    assert not distributions & set(QT_DISTRIBUTIONS), distributions
    probe = installed.run(installed.python, "-c", "import importlib.util as u, ringscope.agent; "
                          "print(u.find_spec('PySide6'), u.find_spec('agent'), u.find_spec('gui'), "
                          "ringscope.agent.__file__)")
    assert probe.returncode == 0, probe.stderr
    qt, agent, gui, where = probe.stdout.split()
    assert (qt, agent, gui) == ("None", "None", "None")
    assert where.startswith(str(installed.venv)) and where.endswith("ringscope/agent/__init__.py")

    version = installed.run(installed.ringscope, "--version")
    assert version.returncode == 0 and version.stdout.startswith("ringscope 0."), version
    for command in ("record", "run", "info", "report"):
        help_text = installed.run(installed.ringscope, command, "--help")
        assert help_text.returncode == 0 and f"usage: ringscope {command}" in help_text.stdout, help_text.stderr


RECORD_THROUGH_A_PROCESS = """
import sqlite3, sys
from ringscope.agent import wire
from ringscope.agent.schema import Step
from ringscope.gui.core.ingest.recorder_process import RecorderProcess
recorder = RecorderProcess(sys.argv[1]).start()
for seq in range(50):
    recorder.on_batch(wire.decode(wire.encode("a", seq, 1.0, [Step(0, seq, 1.0, 2.0, 1.0)])), 5.0)
child = recorder.pid
recorder.close()
rows = sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM step").fetchone()[0]
print(child, rows, recorder.rows_written, recorder.write_errors)
"""


def test_the_recorder_process_starts_from_the_installed_package(installed: Installed, tmp_path: Path) -> None:
    """The child is started as ``python -m ringscope.gui.core.ingest.recorder_process``: from the wheel too."""
    done = installed.run(installed.python, "-c", RECORD_THROUGH_A_PROCESS, str(tmp_path / "s.db"))
    assert done.returncode == 0, done.stderr[-2000:]
    child, rows, written, errors = (int(v) for v in done.stdout.split())
    assert child > 0 and (rows, written, errors) == (50, 50, 0)


def test_a_command_that_needs_an_extra_says_which_in_one_line(installed: Installed, tmp_path: Path) -> None:
    window = installed.run(installed.ringscope, "window")
    assert window.returncode == 2
    assert window.stderr.strip().splitlines() == [
        "ringscope window: the window needs the 'gui' extra (not installed in this Python: PySide6, pyqtgraph, "
        "matplotlib): pip install 'ringscope[gui]'"]
    pdf = installed.run(installed.ringscope, "report", str(tmp_path / "none.db"), "--pdf", str(tmp_path / "r.pdf"))
    assert pdf.returncode == 2
    assert pdf.stderr.strip().splitlines() == [
        "ringscope report: --pdf needs the 'pdf' extra (not installed in this Python: matplotlib): "
        "pip install 'ringscope[pdf]'"]
    assert not list(tmp_path.iterdir())


@dataclass
class Recording:
    """``ringscope record`` of the installed wheel; ``stop()`` ends it with Ctrl-C (SIGINT), as a user would."""

    endpoint: str
    session: Path
    process: subprocess.Popen[str]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def recording(installed: Installed, tmp_path: Path) -> Iterator[Recording]:
    session = tmp_path / "session.db"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    process = subprocess.Popen([installed.ringscope, "record", "--out", str(session), "--bind", endpoint,
                                "--progress-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=_clean_env(), cwd=tmp_path)
    recording = Recording(endpoint, session, process)
    try:
        yield recording
    finally:
        recording.stop()


@pytest.mark.parametrize("order", ["framework-first", "project-first"])
def test_zero_code_records_every_step_of_a_project_with_its_own_agent_gui_trainers(
        installed: Installed, recording: Recording, tmp_path: Path, order: str) -> None:
    project = shutil.copytree(USER_PROJECT, tmp_path / "project")
    env = {**_clean_env(), "IMPORT_ORDER": order, "OMP_NUM_THREADS": "1"}
    trained = subprocess.run(
        [installed.ringscope, "run", "--endpoint", recording.endpoint, "--run-id", f"user-{order}", "--",
         installed.python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
         "train.py", "--steps", str(STEPS)],
        cwd=project, env=env, capture_output=True, text=True, timeout=240)
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert "zero-code instrumentation is off" not in trained.stderr, trained.stderr
    owners = sorted(line.split()[1:] for line in trained.stdout.splitlines() if line.startswith("OWNERS "))
    assert owners == [[str(rank), "user-project", "user-project", "user-project", str(project / "agent")]
                      for rank in (0, 1)], trained.stdout[-2000:] + trained.stderr[-2000:]

    recording.stop()  # the session file is then complete
    info = installed.run(installed.ringscope, "info", str(recording.session))
    assert info.returncode == 0, info.stderr
    summary = json.loads(info.stdout)
    (run,) = summary["runs"]
    assert (run["run_id"], run["framework"], run["world_size"], run["state"]) == (
        f"user-{order}", "pytorch", 2, "finished")
    assert summary["steps_per_rank"] == {"0": STEPS, "1": STEPS}
    assert (summary["missing_messages"], summary["dropped_by_agents"], summary["write_errors"]) == (0, 0, 0)

