"""Test-wide setup: Qt offscreen, no real collector reached by accident, helpers for ports and subprocesses."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Agents started by tests must never talk to a developer's running app on the default port.
os.environ.setdefault("RINGSCOPE_ENDPOINT", "tcp://127.0.0.1:1")
