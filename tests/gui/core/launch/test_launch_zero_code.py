"""The launcher's zero-code option: a user's script is started with the injection environment of
``ringscope.agent.inject`` (the same code ``ringscope run`` uses), reference trainers and opted-out scripts are not."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ringscope.agent.inject import STARTUP_DIR
from ringscope.gui.core.launch import KINDS, Launcher, LaunchSpec, build_commands

ENDPOINT = "tcp://127.0.0.1:5757"


def _first_path(env: dict[str, str]) -> str:
    return env.get("PYTHONPATH", "").split(os.pathsep)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_users_script_is_injected_by_default_whatever_the_launch_kind(kind: str) -> None:
    spec = LaunchSpec(kind=kind, trainer="/x/train.py", processes=2,  # type: ignore[arg-type]
                      env={"PYTHONPATH": "/mine"})
    for plan in build_commands(spec, ENDPOINT):
        assert plan.env["PYTHONPATH"] == os.pathsep.join([str(STARTUP_DIR), "/mine"])
        assert plan.env["RINGSCOPE_ENDPOINT"] == ENDPOINT and plan.env["RINGSCOPE_RUN_ID"]


def test_opted_out_scripts_and_reference_trainers_are_not_injected() -> None:
    off = LaunchSpec(kind="ddp", trainer="/x/train.py", zero_code=False)
    reference = LaunchSpec(kind="ddp")
    for spec in (off, reference):
        (plan,) = build_commands(spec, ENDPOINT)
        assert str(STARTUP_DIR) not in plan.env.get("PYTHONPATH", "")
    assert not off.injects and not reference.injects and LaunchSpec(trainer="/x/t.py").injects


def test_zero_code_is_saved_and_old_saved_launches_default_to_it() -> None:
    spec = LaunchSpec(kind="script", trainer="/x/t.py", zero_code=False)
    assert LaunchSpec.from_dict(spec.to_dict()).zero_code is False
    old = spec.to_dict()
    del old["zero_code"]
    assert LaunchSpec.from_dict(old).zero_code is True


def test_a_launched_script_runs_under_the_bootstrap(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint('bootstrap', sys.modules['sitecustomize'].__file__)\n")
    launcher = Launcher(ENDPOINT)
    run = launcher.start(LaunchSpec(kind="script", trainer=str(script), processes=1, python=sys.executable))
    deadline = time.monotonic() + 30
    while run.alive and time.monotonic() < deadline:
        launcher.poll()
        time.sleep(0.05)
    launcher.poll()
    (process,) = run.processes
    lines = process.output.since(0)[2]
    assert run.ok, lines
    assert f"bootstrap {STARTUP_DIR / 'sitecustomize.py'}" in lines
