"""Print the access token agents need to reach a collector started with --secure.

    ringscope keys [--key-file FILE] [--export]

Creates the collector's keys on first use. Give the token to the trainings (RINGSCOPE_KEY=...), or point them at
the token file on a shared file system (RINGSCOPE_KEY_FILE=...); trainings launched from the window get it
automatically.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ringscope.gui.commands._args import EXIT_USAGE, fail, os_error_text, output_file

if TYPE_CHECKING:
    from ringscope.agent.keys import CollectorKeys


_KEY_FILE_HELP = ("collector key file, created (with missing folders) on first use "
                  "(default ~/.local/share/ringscope/collector-keys.json)")


def add_secure_arguments(parser: argparse.ArgumentParser) -> None:
    """``--secure`` and ``--key-file`` for the commands that run a collector (window, demo, record)."""
    parser.add_argument("--secure", action="store_true",
                        help="require agents to authenticate and encrypt telemetry (ZeroMQ CURVE); agents need "
                             "the access token ('ringscope keys'); trainings launched from the window get it")
    parser.add_argument("--key-file", type=output_file, metavar="FILE", help=_KEY_FILE_HELP + "; used with --secure")


def secure_keys(args: argparse.Namespace, command: str) -> tuple[CollectorKeys | None, int]:
    """The collector keys ``args`` ask for (None without ``--secure``) and 0, or (None, 2) after printing why the
    key file cannot be used. Also tells where the agents' token is."""
    if not getattr(args, "secure", False):
        return None, 0
    from ringscope.gui.core.ingest.access import ENV_KEY_FILE

    loaded = _load(args.key_file, command)
    if loaded is None:
        return None, EXIT_USAGE
    keys, token_file = loaded
    print(f"ringscope {command}: agents must authenticate (CURVE); give them {ENV_KEY_FILE}={token_file} or the "
          "token from 'ringscope keys'", file=sys.stderr)
    return keys, 0


def _load(key_file: str | None, command: str) -> tuple[CollectorKeys, Path] | None:
    """The collector's keys (created on first use) and the agents' token file written beside them; None after
    printing why the key file cannot be used."""
    from ringscope.agent.keys import AccessKeyError
    from ringscope.gui.core.ingest.access import collector_keys, default_key_path, write_agent_token

    try:
        keys = collector_keys(key_file)
        return keys, write_agent_token(keys, key_file)
    except AccessKeyError as exc:
        fail(command, str(exc))
    except OSError as exc:
        where = f"--key-file {key_file}" if key_file else f"the default key file {default_key_path()}"
        fail(command, f"cannot write {where}: {os_error_text(exc)}; choose another --key-file FILE")
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope keys``."""
    parser.add_argument("--key-file", type=output_file, metavar="FILE", help=_KEY_FILE_HELP)
    parser.add_argument("--export", action="store_true", help="print only 'export RINGSCOPE_KEY=...' (for eval)")


def run(args: argparse.Namespace) -> int:
    """Print the token (and where it is stored); exit 2 when the key file is unusable."""
    from ringscope.gui.core.ingest.access import ENV_KEY, ENV_KEY_FILE, default_key_path

    loaded = _load(args.key_file, "keys")
    if loaded is None:
        return EXIT_USAGE
    keys, token_file = loaded
    if args.export:
        print(f"export {ENV_KEY}={shlex.quote(keys.agent_keys.token)}")
        return 0
    print(f"collector keys: {args.key_file or default_key_path()}")
    print(f"agents: {ENV_KEY_FILE}={token_file}   (or {ENV_KEY}=<the token below>)")
    print(keys.agent_keys.token)
    return 0
