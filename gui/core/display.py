"""Can a Qt window open here? Answers before Qt is started, because Qt's own answer is an abort.

Owns the list of shared libraries Qt's xcb platform plugin (X11) needs and the Debian packages that provide them.
Qt loads the plugin only when the first ``QApplication`` is built and aborts the process ("could not load the Qt
platform plugin xcb") when one of them is missing; checking them here turns that into one line naming the
packages to install. Must never import Qt.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping
from typing import Final

QT_XCB_LIBRARIES: Final[dict[str, str]] = {
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3",
}
"""Shared library (as the plugin and ``libQt6XcbQpa`` name them, ``readelf -d``) -> Debian package providing it."""

ALL_QT_XCB_PACKAGES: Final[str] = ("libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 "
                                   "libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 "
                                   "libxkbcommon-x11-0 libegl1 libgl1 libfontconfig1 libdbus-1-3")
"""What a minimal Debian with Xvfb needed for a real window (measured, ENVIRONMENT.md); the README's line."""


def qt_platform(env: Mapping[str, str]) -> str:
    """The Qt platform plugin Qt will pick on Linux: ``QT_QPA_PLATFORM`` when set, else wayland or xcb from the
    session's variables; '' when there is no display at all."""
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(":")[0].split(";")[0]
    if env.get("WAYLAND_DISPLAY"):
        return "wayland"
    return "xcb" if env.get("DISPLAY") else ""


def missing_libraries(names: Mapping[str, str] = QT_XCB_LIBRARIES) -> list[str]:
    """The libraries of ``names`` that the dynamic loader cannot load here (it is asked, as Qt will ask it)."""
    missing = []
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            missing.append(name)
    return missing


def display_problem(env: Mapping[str, str]) -> str | None:
    """Why no Qt window can open in environment ``env`` (no display, or Qt's xcb libraries missing), or None."""
    if not sys.platform.startswith("linux"):
        return None
    platform = qt_platform(env)
    if not platform or (platform == "xcb" and not env.get("DISPLAY")):
        return ("no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset). On a headless machine "
                "run 'xvfb-run ringscope ...', or record without a window: 'ringscope record --out SESSION.db' and "
                "open the report with 'ringscope report SESSION.db --html report.html'.")
    if platform != "xcb":
        return None
    missing = missing_libraries()
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(QT_XCB_LIBRARIES[name] for name in missing))
    return (f"Qt cannot open a window on X11 (DISPLAY={env.get('DISPLAY')}): missing {', '.join(missing)}. "
            f"Install them with: sudo apt-get install -y {packages}   (Debian/Ubuntu package names)")
