"""The ``ringscope`` help a new user reads: a version, every command listed, plain text (no reStructuredText),
defaults that are the real defaults, and one name (metavar) per kind of value across all commands."""

from __future__ import annotations

import argparse
import re

import pytest

from ringscope.gui.cli import COMMANDS, build_parser, main
from ringscope.gui.core.launch import DEMO_STEPS


def _command_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert re.fullmatch(r"ringscope \d+\.\d+\.\d+ \(telemetry schema \d+\.\d+\)\n", capsys.readouterr().out)


def test_top_level_help_lists_every_command_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command} " in text
    assert "exit codes:" in text and "  2  a bad argument" in text


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_is_plain_text_with_the_real_defaults(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    assert "`" not in text, "reStructuredText markup in --help"
    flowing = re.sub(r"\s+", " ", text)
    for action in _command_parsers()[command]._actions:
        if action.help and "%(default)" in action.help:
            shown = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
            assert f"default {shown}" in flowing, action.dest
    if command == "demo":
        assert f"(default {DEMO_STEPS}," in text


def test_one_metavar_per_option_and_sessions_are_dot_db() -> None:
    metavars: dict[str, set[str]] = {}
    for parser in _command_parsers().values():
        for action in parser._actions:
            if action.nargs == 0:
                continue
            if not action.option_strings and action.dest.startswith("session"):
                assert str(action.metavar).endswith(".db"), f"{parser.prog}: positional {action.metavar}"
            for option in action.option_strings:
                metavars.setdefault(option, set()).add(str(action.metavar))
    # The same option name for a different kind of value, each named for its kind: record writes a session file,
    # sweep a folder; simulate takes one rank count, sweep a list of them.
    different_kinds = {"--out": {"SESSION.db", "DIR"}, "--ranks": {"N", "N,N,..."}}
    assert {option: names for option, names in metavars.items() if len(names) > 1} == different_kinds
    assert metavars["--bind"] == {"ENDPOINT"} and metavars["--record"] == {"SESSION.db"}
    assert metavars["--key-file"] == {"FILE"} and metavars["--html"] == {"FILE"} and metavars["--csv"] == {"DIR"}
    assert metavars["--duration"] == {"SECONDS"} and metavars["--steps"] == {"N"}
