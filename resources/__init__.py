"""Package data: icons, style sheets, report templates. Locate files with ``resources.path(name)``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Absolute path of a resource file shipped with Ringscope."""
    return ROOT / name
