"""Test-wide setup: Qt offscreen, no real collector reached by accident, no writes to the user's settings."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Agents started by tests must never talk to a developer's running app on the default port.
os.environ.setdefault("RINGSCOPE_ENDPOINT", "tcp://127.0.0.1:1")
# QSettings (preferences, recent launches) and default session files go to a throw-away home, in this process
# and in every subprocess a test starts, so tests never read or write the user's real configuration.
_scratch_home = tempfile.mkdtemp(prefix="ringscope-tests-")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_scratch_home, "config")
os.environ["XDG_DATA_HOME"] = os.path.join(_scratch_home, "data")
