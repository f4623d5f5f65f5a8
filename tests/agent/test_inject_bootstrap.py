"""The zero-code bootstrap (``agent/inject/startup/sitecustomize.py``) in real interpreters, without a framework.

What must hold for every Python process started under the injection (pip, compilers, a script's helpers...): it
imports nothing of Ringscope, leaves output and exit code alone, runs the ``sitecustomize`` it shadows, honours
``RINGSCOPE_DISABLE=1``, and a failure costs one stderr line and nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ringscope.agent.inject import STARTUP_DIR, injection_env, prepend_path

OFF_LINE = "ringscope: zero-code instrumentation is off in this process"
PROBE = ("import sys; print(type(sys.meta_path[0]).__name__, sys.modules['sitecustomize'].__file__, "
         "'ringscope' in sys.modules); sys.exit(4)")


def _python(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RINGSCOPE_")}
    env.update(extra)
    env.update(injection_env(env))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30,
                          check=False)


def test_the_bootstrap_watches_for_frameworks_and_imports_nothing_of_ringscope() -> None:
    done = _python(PROBE)
    assert done.returncode == 4 and done.stderr == ""
    watcher, sitecustomize, agent_imported = done.stdout.split()
    assert watcher == "_FrameworkWatcher" and Path(sitecustomize) == STARTUP_DIR / "sitecustomize.py"
    assert agent_imported == "False"


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("print('theirs ran')\n")
    done = _python(PROBE, PYTHONPATH=str(tmp_path))
    assert done.returncode == 4, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "theirs ran"
    assert second.split()[:2] == ["_FrameworkWatcher", str(tmp_path / "sitecustomize.py")]


def test_disable_means_no_watcher_and_no_output() -> None:
    done = _python("import sys; print(sorted(type(f).__name__ for f in sys.meta_path))", RINGSCOPE_DISABLE="1")
    assert (done.returncode, done.stderr) == (0, "") and "_FrameworkWatcher" not in done.stdout


def test_a_broken_bootstrap_costs_one_line_and_nothing_else() -> None:
    done = _python("print('hello'); raise SystemExit(3)", RINGSCOPE_INJECT_FAULT="bootstrap")
    assert (done.returncode, done.stdout) == (3, "hello\n")
    assert done.stderr.count(OFF_LINE) == 1 and len(done.stderr.splitlines()) == 1


def test_injection_env_puts_the_startup_directory_first_once() -> None:
    base = {"PYTHONPATH": os.pathsep.join(["/a", str(STARTUP_DIR), "", "/b"])}
    added = injection_env(base, endpoint="tcp://h:1", run_id="r")
    assert added == {"PYTHONPATH": os.pathsep.join([str(STARTUP_DIR), "/a", "/b"]),
                     "RINGSCOPE_ENDPOINT": "tcp://h:1", "RINGSCOPE_RUN_ID": "r"}
    assert injection_env({**base, **added}) == {"PYTHONPATH": added["PYTHONPATH"]}
    assert prepend_path("/x", "") == "/x"
