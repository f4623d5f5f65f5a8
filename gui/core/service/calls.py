"""What the window may use of the ingest process, declared once: the server answers these calls and no others, the
window's stand-ins forward exactly these (``ringscope.gui.core.service.remote``), and the client gives a process
started in place of a crashed one the settings marked ``replay`` again.

A call on the calls channel is ``(target, name, args)``: a ``METHOD`` is called with ``args``; a ``SETTING`` is read
with no argument and set with one; a ``FIGURE`` is only read. ``store`` calls name the run id as their first argument.

What it must never do: import Qt, or name anything a window has no business with (``ingest.call("runs", "__init__")``
is refused because it is not listed here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

CALL_TIMEOUT_S: Final[float] = 30.0
"""The longest a window thread waits for an answer from the ingest process."""

Kind = Literal["method", "setting", "figure"]
Replay = Literal["", "latest", "per_run"]


@dataclass(frozen=True, slots=True)
class Exposed:
    """One thing of an ingest-process object that the window may use.

    Args:
        kind: ``method`` (called), ``setting`` (read, or set with one argument) or ``figure`` (read).
        replay: what a process started in place of a crashed one is given again: ``""`` nothing (what the recorder
            was told is in the recording already), ``latest`` the latest call, ``per_run`` the latest call for each
            run (the first argument).
    """

    kind: Kind = "method"
    replay: Replay = ""


_METHOD: Final = Exposed()

EXPOSED: Final[dict[str, dict[str, Exposed]]] = {
    "runs": {"note_launch": _METHOD, "note_stop_requested": Exposed("method", "per_run"), "hang": _METHOD,
             "agent_of_rank": _METHOD, "priced_until": _METHOD, "run_ids": _METHOD, "rows": _METHOD,
             "lost_timeout_s": Exposed("setting", "latest"), "hang_minimum_s": Exposed("setting", "latest")},
    "store": {"to_session_data": _METHOD, "step_end_times": _METHOD, "snapshot": _METHOD},
    "recorder": {"note_launch": _METHOD, "note_event": _METHOD},
    "collector": {"counters": Exposed("figure")},
    "service": {"serve_metrics": Exposed("method", "latest"), "crash": _METHOD, "pid": _METHOD},
}
"""Every call the window may make: target -> name -> how. The runs' ``lost_timeout_s`` reaches every store of the
process (``LiveRuns.lost_timeout_s``): stores have no setting of their own here."""


def exposed(target: str, name: str) -> Exposed:
    """How ``target.name`` may be used; raises ``ValueError`` naming the call when the window may not use it."""
    found = EXPOSED.get(target, {}).get(name)
    if found is None:
        raise ValueError(f"no such call: {target}.{name}")
    return found


def replay_key(target: str, name: str, args: tuple[object, ...]) -> tuple[str, str, object] | None:
    """Under which key a call must be kept to be given again to a restarted process (the latest of each key), or
    None when it need not be (reading a setting is never kept)."""
    how = EXPOSED.get(target, {}).get(name)
    if how is None or not how.replay or (how.kind == "setting" and not args):
        return None
    return (target, name, args[0] if how.replay == "per_run" and args else None)
