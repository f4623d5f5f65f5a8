"""``--secure``: a CURVE collector over real sockets admits only agents holding its access token, and says so.

Keys, token parsing and key files are tested here too, since the collector is their one consumer on the app side.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringscope import agent
from ringscope.agent.keys import ENV_KEY, ENV_KEY_FILE, AccessKeyError, AgentKeys, CollectorKeys, agent_keys_from_env
from ringscope.gui.core.ingest.access import collector_keys, write_agent_token
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.launch import Launcher
from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.spec import LaunchSpec
from tests.sinks import KeepingSink, wait_for


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[tuple[Collector, KeepingSink, CollectorKeys]]:
    keys = collector_keys(tmp_path / "keys.json")
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink], keys=keys).start()
    yield collector, sink, keys
    collector.close()


def _send_steps(endpoint: str, keys: AgentKeys | None, run_id: str, steps: int = 5) -> None:
    telemetry = agent.start(framework="other", strategy="ddp", endpoint=endpoint, run_id=run_id, keys=keys,
                            sample_devices=False)
    for i in range(steps):
        telemetry.step(0, i, 100.0 + i, 100.5 + i)
    telemetry.close(1.0)


def test_only_agents_with_the_token_get_in_and_the_others_are_counted(secure, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    collector, sink, keys = secure
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    stranger = CollectorKeys.generate().agent_keys  # a key pair this collector does not allow
    _send_steps(collector.endpoint, None, "plaintext")
    _send_steps(collector.endpoint, AgentKeys(keys.server_public, stranger.client_public, stranger.client_secret),
                "wrong-key")
    monkeypatch.setenv(ENV_KEY, keys.agent_keys.token)  # what a launched or instructed training has
    _send_steps(collector.endpoint, None, "holder")
    assert wait_for(lambda: len(sink.steps()) >= 5, 10)
    run_ids = {r.run_id for b, _ in sink.batches for r in b.records if hasattr(r, "run_id")}
    assert run_ids == {"holder"}
    assert [s.step for s in sink.steps()] == [0, 1, 2, 3, 4]
    assert collector.counters.rejected.get("unauthenticated", 0) >= 2  # one failed handshake per stranger, at least
    assert all("RINGSCOPE_KEY" in r.detail for r in sink.rejections if r.reason == "unauthenticated")


def test_a_bad_token_turns_telemetry_off_with_a_clear_error_and_never_plaintext(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(ENV_KEY, "rsk1_too_short_keys")
    with caplog.at_level(logging.ERROR, logger="ringscope.agent.runtime"):
        telemetry = agent.start(framework="other", strategy="ddp", endpoint="tcp://127.0.0.1:1", run_id="x",
                                sample_devices=False)
    assert telemetry.enabled is False
    telemetry.step(0, 0, 1.0, 2.0)  # the training's calls still work and do nothing
    telemetry.close()
    assert "collector public key is not 40 Z85 characters" in caplog.text and "telemetry is off" in caplog.text


def test_token_round_trip_and_what_each_malformed_token_says(tmp_path: Path) -> None:
    keys = CollectorKeys.generate()
    assert AgentKeys.from_token(keys.agent_keys.token) == keys.agent_keys
    for token, says in [("hello", "not a Ringscope access token"),
                        ("rsk2_" + keys.agent_keys.token[5:], "not a Ringscope access token"),
                        (keys.agent_keys.token[:-1], "agent secret key is not 40 Z85 characters (got 39)")]:
        with pytest.raises(AccessKeyError, match=says.replace("(", r"\(").replace(")", r"\)")):
            AgentKeys.from_token(token)
    token_file = write_agent_token(keys, tmp_path / "keys.json")
    assert agent_keys_from_env({ENV_KEY_FILE: str(token_file)}) == keys.agent_keys
    assert agent_keys_from_env({}) is None
    with pytest.raises(AccessKeyError, match="cannot read the token file"):
        agent_keys_from_env({ENV_KEY_FILE: str(tmp_path / "missing")})


def test_key_file_is_private_reused_and_a_damaged_one_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ringscope" / "keys.json"
    first = collector_keys(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert collector_keys(path) == first  # the same keys next time: agents keep their token
    assert stat.S_IMODE(os.stat(write_agent_token(first, path)).st_mode) == 0o600
    path.write_text('{"format": "rsk1", "server_public": "x"}')
    with pytest.raises(AccessKeyError, match="cannot read the key file"):
        collector_keys(path)


def test_launched_trainings_get_the_token(tmp_path: Path) -> None:
    token = CollectorKeys.generate().agent_keys.token
    script = tmp_path / "train.py"
    script.write_text("import os\nprint('key=' + os.environ.get('RINGSCOPE_KEY', 'none'))\n")
    spec = LaunchSpec(kind="script", trainer=str(script), processes=1)
    (plan,) = build_commands(spec, "tcp://127.0.0.1:5757", {ENV_KEY: token})
    assert plan.env[ENV_KEY] == token and plan.env["RINGSCOPE_ENDPOINT"] == "tcp://127.0.0.1:5757"
    launcher = Launcher("tcp://127.0.0.1:5757", agent_env={ENV_KEY: token})
    try:
        (process,) = launcher.start(spec).processes  # a real process: what it printed is what it received
        assert wait_for(lambda: (launcher.poll(), process.state == "exited")[1], 20)
        assert f"key={token}" in process.output.since(0)[2]
    finally:
        launcher.close(grace_s=0.5)


def test_keys_command_prints_a_token_agents_accept(tmp_path: Path) -> None:
    key_file = tmp_path / "keys.json"
    out = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "keys", "--key-file", str(key_file)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    token = out.strip().splitlines()[-1]
    assert AgentKeys.from_token(token) == collector_keys(key_file).agent_keys
    exported = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "keys", "--key-file", str(key_file),
                               "--export"],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    assert exported.strip() == f"export {ENV_KEY}={shlex.quote(token)}"


def test_an_agent_with_a_token_at_a_plain_collector_is_counted_not_silent(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    sink = KeepingSink()
    collector = Collector("tcp://127.0.0.1:0", [sink]).start()
    try:
        _send_steps(collector.endpoint, CollectorKeys.generate().agent_keys, "has-a-token")
        _send_steps(collector.endpoint, None, "plain")
        assert wait_for(lambda: len(sink.steps()) >= 5, 10)
        assert wait_for(lambda: collector.counters.rejected.get("handshake", 0) >= 1, 10)
        assert {r.run_id for b, _ in sink.batches for r in b.records if hasattr(r, "run_id")} == {"plain"}
        assert any("without --secure" in r.detail for r in sink.rejections)
    finally:
        collector.close()
