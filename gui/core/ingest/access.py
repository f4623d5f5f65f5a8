"""Where this machine's collector keys live, and the access token agents need (``--secure``, ``ringscope keys``).

The keys themselves (CURVE, token format) are ``ringscope.agent.keys``; this module only decides the files: the
collector's
key file ``~/.local/share/ringscope/collector-keys.json`` and, next to it, ``agent-token`` holding the token alone
(both mode 0600, ``XDG_DATA_HOME`` respected), for ``RINGSCOPE_KEY_FILE`` on a shared file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from ringscope.agent.keys import ENV_KEY, ENV_KEY_FILE, CollectorKeys

__all__ = ["ENV_KEY", "ENV_KEY_FILE", "collector_keys", "default_key_path", "write_agent_token"]


def default_key_path() -> Path:
    """``~/.local/share/ringscope/collector-keys.json`` (``XDG_DATA_HOME`` respected)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "ringscope" / "collector-keys.json"


def collector_keys(path: str | os.PathLike[str] | None = None) -> CollectorKeys:
    """The collector's keys from ``path`` (default ``default_key_path()``), created on first use. Raises
    ``ringscope.agent.keys.AccessKeyError`` when the file exists but is unusable."""
    return CollectorKeys.load_or_create(path or default_key_path())


def write_agent_token(keys: CollectorKeys, key_path: str | os.PathLike[str] | None = None) -> Path:
    """Write the agents' token to ``agent-token`` beside the key file (mode 0600); returns its path."""
    target = Path(key_path or default_key_path()).with_name("agent-token")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(keys.agent_keys.token + "\n")
    return target
