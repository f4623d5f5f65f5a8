"""Opt-in authentication and encryption of the telemetry channel (ZeroMQ CURVE), shared by agents and collector.

By default telemetry travels in the clear and the collector listens on loopback only. For agents on other nodes
(``--bind tcp://0.0.0.0:5757``) on a shared network, the collector can require CURVE: every connection is
encrypted and only agents holding the **access token** get in. The token is one string an agent reads from
``RINGSCOPE_KEY`` (or from the file named by ``RINGSCOPE_KEY_FILE``); it carries the collector's public key and
the one client key pair the collector allows::

    rsk1_<collector public key>_<agent public key>_<agent secret key>      (Z85, 40 characters each)

(``_`` separates because it is not a Z85 character; Z85 does use shell characters such as ``$`` and ``&``, so
quote the token in a shell: ``ringscope keys --export`` prints it quoted.)

Treat the token like a password: whoever has it can send telemetry. The collector's secret key never leaves
its key file (``CollectorKeys.load_or_create``, mode 0600). Cost, measured by ``benchmarks/bench_ingest.py``: +2 %
collector CPU per record at 1024 ranks x 100 steps/s, +19 % at 64 ranks; nothing lost.

What this module must never do: send anything, or fall back to plaintext when a token was given but is wrong.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import zmq

TOKEN_PREFIX: Final[str] = "rsk1"
TOKEN_SEPARATOR: Final[str] = "_"
ENV_KEY: Final[str] = "RINGSCOPE_KEY"
ENV_KEY_FILE: Final[str] = "RINGSCOPE_KEY_FILE"
_Z85_KEY = re.compile(r"^[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")


class AccessKeyError(ValueError):
    """A token or key file is malformed; the message says what is wrong and where it came from."""


@dataclass(frozen=True, slots=True)
class AgentKeys:
    """What an agent needs to reach a CURVE collector (Z85 text keys)."""

    server_public: str
    client_public: str
    client_secret: str

    @property
    def token(self) -> str:
        """The access token (``RINGSCOPE_KEY``) that carries these keys."""
        return TOKEN_SEPARATOR.join((TOKEN_PREFIX, self.server_public, self.client_public, self.client_secret))

    @classmethod
    def from_token(cls, token: str, source: str = ENV_KEY) -> AgentKeys:
        """Parse a token; ``source`` names where it came from in the error message."""
        parts = token.strip().split(TOKEN_SEPARATOR)
        if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
            raise AccessKeyError(f"{source} is not a Ringscope access token (expected '{TOKEN_PREFIX}' and three "
                                 f"40-character keys, separated by '{TOKEN_SEPARATOR}'); copy it again from "
                                 "`ringscope keys`")
        for name, key in zip(("collector public", "agent public", "agent secret"), parts[1:], strict=True):
            if not _Z85_KEY.match(key):
                raise AccessKeyError(f"{source}: the {name} key is not 40 Z85 characters (got {len(key)}); "
                                     "copy the token again")
        return cls(parts[1], parts[2], parts[3])

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Make ``socket`` (before ``connect``) a CURVE client of the collector."""
        socket.curve_serverkey = self.server_public.encode()
        socket.curve_publickey = self.client_public.encode()
        socket.curve_secretkey = self.client_secret.encode()


@dataclass(frozen=True, slots=True)
class CollectorKeys:
    """The collector's key pair and the agent key pair it allows (Z85 text keys)."""

    server_public: str
    server_secret: str
    client_public: str
    client_secret: str

    @classmethod
    def generate(cls) -> CollectorKeys:
        """Fresh key pairs for the collector and its agents."""
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public.decode(), server_secret.decode(), client_public.decode(), client_secret.decode())

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> CollectorKeys:
        """Read the key file at ``path``; create it (mode 0600) with fresh keys when it does not exist."""
        target = Path(path)
        if not target.exists():
            keys = cls.generate()
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"format": TOKEN_PREFIX, **{f: getattr(keys, f) for f in cls.__slots__}}, handle)
            return keys
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
            keys = cls(*(str(data[f]) for f in cls.__slots__))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AccessKeyError(f"cannot read the key file {target}: {exc}; move it away to create new keys "
                                 "(agents then need the new token)") from None
        for name in cls.__slots__:
            if not _Z85_KEY.match(getattr(keys, name)):
                raise AccessKeyError(f"key file {target}: {name} is not a 40-character Z85 key")
        return keys

    @property
    def agent_keys(self) -> AgentKeys:
        """The keys agents need (their token: ``agent_keys.token``)."""
        return AgentKeys(self.server_public, self.client_public, self.client_secret)

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Make ``socket`` (before ``bind``) a CURVE server with this key pair."""
        socket.curve_secretkey = self.server_secret.encode()
        socket.curve_publickey = self.server_public.encode()
        socket.curve_server = True


def agent_keys_from_env(env: Mapping[str, str] | None = None) -> AgentKeys | None:
    """The agent's keys from ``RINGSCOPE_KEY`` or the file named by ``RINGSCOPE_KEY_FILE``; None when neither is
    set (plaintext). Raises ``AccessKeyError`` when one is set but unusable."""
    env = os.environ if env is None else env
    token = env.get(ENV_KEY, "").strip()
    if token:
        return AgentKeys.from_token(token)
    path = env.get(ENV_KEY_FILE, "").strip()
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AccessKeyError(f"{ENV_KEY_FILE}={path}: cannot read the token file ({exc.strerror or exc})") from None
    return AgentKeys.from_token(text, source=f"{ENV_KEY_FILE}={path}")
