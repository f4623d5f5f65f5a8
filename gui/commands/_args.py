"""The one place where command-line values are checked: argparse ``type=`` validators, endpoint rules, output
paths, and the one-line error every command prints.

Rules every command follows (the help and the tests rely on them):

* a bad value is one line on stderr, ``ringscope COMMAND: argument --OPTION: <what was wrong>, got <value>``, and
  exit code 2; nothing is created or written before every argument has been checked;
* outputs (``--html``, ``--pdf``, ``--trace``, ``--csv``, ``--out``, ``--record``, ``--key-file``): missing parent
  folders are created, for every output alike; a path under a regular file, a folder given for a file (or a file
  for a folder) and an existing session file are refused up front;
* a write that fails anyway names the option and the reason (``strerror``), never a temporary file, and removes
  the folders it created.

Never imports Qt: the headless commands use it on machines without a display.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from ringscope.agent.simulate import MAX_STEPS_PER_SECOND, parse_straggler

EXIT_USAGE = 2
"""Exit code of every bad argument, unusable file or endpoint (as argparse itself uses)."""
EXIT_FAILED = 1
"""Exit code of a command that started but could not do its job (e.g. ``simulate`` delivered nothing)."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line: what was wrong and where to look (``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}; see '{self.prog} --help'\n")


def fail(command: str, message: str) -> int:
    """Print ``ringscope COMMAND: message`` on stderr (one line) and return the usage exit code (2)."""
    print(f"ringscope {command}: {message}", file=sys.stderr)
    return EXIT_USAGE


# ---- Numbers -----------------------------------------------------------------------------------------------------


def _number(text: str, convert: Callable[[str], float], accepted: str) -> float:
    try:
        value = convert(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}")
    return value


def _at_least(minimum: float, accepted: str, *, strictly: bool = False, integer: bool = False,
              maximum: float = math.inf) -> Callable[[str], float]:
    def check(text: str) -> float:
        value = _number(text, int if integer else float, accepted)
        if value < minimum or (strictly and value == minimum) or value > maximum:
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}")
        return value

    return check


_positive_int = _at_least(1, "a whole number >= 1", integer=True)
_seconds = _at_least(0, "a number of seconds > 0", strictly=True)
_seconds_or_zero = _at_least(0, "a number of seconds >= 0")
_milliseconds = _at_least(0, "a number of milliseconds >= 0")
_price = _at_least(0, "a price per GPU-hour > 0 (e.g. 2.5)", strictly=True)
_step_rate = _at_least(0, f"a step rate > 0 and <= {MAX_STEPS_PER_SECOND:g} per second", strictly=True,
                       maximum=MAX_STEPS_PER_SECOND)


def command_words(words: Iterable[str]) -> list[str]:
    """What followed ``--`` on the command line (argparse's REMAINDER keeps the ``--`` itself)."""
    command = list(words)
    return command[1:] if command[:1] == ["--"] else command


def positive_int(text: str) -> int:
    """A count: a whole number >= 1 (ranks, steps, processes)."""
    return int(_positive_int(text))


def seconds(text: str) -> float:
    """A duration: a finite number of seconds > 0."""
    return _seconds(text)


def seconds_or_zero(text: str) -> float:
    """A finite number of seconds >= 0 (where 0 means 'off' or 'forever', as the option's help says)."""
    return _seconds_or_zero(text)


def milliseconds(text: str) -> float:
    """A finite number of milliseconds >= 0."""
    return _milliseconds(text)


def price(text: str) -> float:
    """A price per GPU-hour: a finite number > 0."""
    return _price(text)


def step_rate(text: str) -> float:
    """Steps per second of the simulator: > 0 and at most ``MAX_STEPS_PER_SECOND``."""
    return _step_rate(text)


def straggler(text: str) -> tuple[int, float]:
    """``RANK:MS`` of ``simulate --straggler``."""
    try:
        return parse_straggler(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:MS, a rank >= 0 and milliseconds >= 0 (e.g. 5:40), "
                                         f"got {text!r}") from None


def add_price_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """``--price-per-gpu-hour PRICE``, the same for every command that prices a session."""
    parser.add_argument("--price-per-gpu-hour", type=price, default=None, metavar="PRICE",
                        help=f"price per GPU-hour, a number > 0 (default: {default})")


# ---- Endpoints ---------------------------------------------------------------------------------------------------

_ENDPOINT_FORMS = "tcp://HOST:PORT or ipc://PATH"


def check_endpoint(text: str, *, bind: bool) -> str:
    """``text`` when it is an endpoint ZeroMQ can bind (``bind=True``: port 0 or ``*`` picks a free one, host ``*``
    means every interface) or connect to (port 1..65535, a real host); else ``ValueError`` saying what is
    accepted."""
    scheme, sep, rest = text.partition("://")
    if scheme == "ipc" and sep and rest:
        return text
    if scheme != "tcp" or not sep:
        raise ValueError(f"expected {_ENDPOINT_FORMS} (e.g. tcp://127.0.0.1:5757), got {text!r}")
    host, colon, port_text = rest.rpartition(":")
    if not colon or not host or any(c.isspace() or c in "/?#" for c in host):
        raise ValueError(f"expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:5757), got {text!r}")
    if host == "*" and not bind:
        raise ValueError(f"cannot connect to the wildcard host '*' in {text!r}; give the collector's host name or "
                         "address (e.g. tcp://127.0.0.1:5757)")
    if bind and port_text == "*":
        return text
    lowest = 0 if bind else 1
    if not port_text.isdigit() or not lowest <= int(port_text) <= 65535:
        free = " (0 or * picks a free port)" if bind else ""
        raise ValueError(f"expected a port in {lowest}..65535{free}, got {port_text!r} in {text!r}")
    return text


def bind_endpoint(text: str) -> str:
    """An endpoint a collector can bind (``--bind``)."""
    try:
        return check_endpoint(text, bind=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def connect_endpoint(text: str) -> str:
    """An endpoint agents can connect to (``simulate --endpoint``)."""
    try:
        return check_endpoint(text, bind=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bind_problem(endpoint: str) -> str | None:
    """None when a collector can bind ``endpoint`` now, else why not (one line). Binds a real collector for a
    moment: the same library and socket options as the real one, so 'in use', 'cannot assign' and unknown host
    names are found before a window is built."""
    from ringscope.gui.core.ingest import collector as collector_module
    from ringscope.gui.core.ingest.collector import Collector, CollectorError

    quiet = logging.getLogger(collector_module.__name__)
    was_disabled, quiet.disabled = quiet.disabled, True  # the trial bind is not news ("listening on ...")
    try:
        check_endpoint(endpoint, bind=True)
        Collector(endpoint, []).start().close()
    except ValueError as exc:
        return str(exc)
    except CollectorError as exc:
        if "address in use" not in str(exc):
            return (f"{exc}; give an address of this machine (tcp://0.0.0.0:PORT listens on every interface, "
                    "tcp://127.0.0.1:0 on a free local port)")
        port = endpoint.rpartition(":")[2]
        return (f"port {port} is in use ({endpoint}) by another process (another Ringscope window or "
                "'ringscope record'?); close it, or choose another port (tcp://127.0.0.1:0 picks a free one)")
    finally:
        quiet.disabled = was_disabled
    return None


# ---- Paths -------------------------------------------------------------------------------------------------------


def _creatable(path: Path, text: str) -> None:
    """Raise ``ArgumentTypeError`` unless the missing folders above ``path`` can be created."""
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor == ancestor.parent:
            break
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{ancestor} is a file, not a folder, so {text!r} cannot be created")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"folder {ancestor} is not writable, so {text!r} cannot be created")


def output_file(text: str) -> str:
    """A file to write (replaced when it exists); missing folders above it are created later."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give the name of a file (in it or elsewhere)")
    _creatable(path, text)
    return text


def output_folder(text: str) -> str:
    """A folder to write files into (created when missing)."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder name, got ''")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder")
    _creatable(path, text)
    return text


def new_session_file(text: str) -> str:
    """A session file to create: sessions are never overwritten, so it must not exist yet."""
    output_file(text)
    if Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text!r} already exists; give a new file name (a session is never "
                                         "overwritten)")
    return text


def create_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Create the missing folders of ``paths`` (each a folder itself); returns the ones created, outermost first,
    for ``remove_folders``. Raises ``OSError``."""
    created: list[Path] = []
    for path in paths:
        missing = [p for p in (Path(path), *Path(path).parents) if not p.exists()]
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
    return created


def remove_folders(created: list[Path]) -> None:
    """Remove the folders ``create_folders`` made, innermost first, where they are still empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty (something else was written there) or already gone


def os_error_text(exc: OSError) -> str:
    """The reason of an ``OSError`` without its file name (which may be a temporary file's)."""
    return exc.strerror or type(exc).__name__
