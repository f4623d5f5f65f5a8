"""Requests a tool sends through the collector to a run's agents (stacks, settings), and the answers it gets back.

The collector (``ringscope.gui.core.ingest.collector``) owns the socket; this module owns the bookkeeping it needs:

* ``Routes``: for every agent heard from, the ZeroMQ routing identity of its connection (the latest one: an agent
  that reconnects gets a new one), its run, ranks, host and pid, and when it was last heard from;
* ``Requests``: the requests in flight: which agents were asked, what they answered (``Event`` records of kind
  ``stacks`` / ``control`` whose text is JSON carrying the request id), and when to stop waiting.

A request ends when every agent asked has answered, or at its deadline. Agents that did not answer are named in
the reply with the likely reason. For ``stacks``, one that runs on this host is then read from outside with
``py-spy dump --native`` (a well-kept tool; it needs ptrace permission on the process, see ``native_stacks``): an
agent whose training thread holds the GIL in native code cannot run its own sender thread, and that native stack
is exactly what a user needs then. Reading it takes up to ``NATIVE_TIMEOUT_S``, on a thread of its own.

No sockets, no Qt: the collector calls ``open`` / ``answer`` / ``due`` from its receive thread only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from ringscope.agent.control import PROFILE, SET, STACKS, Control
from ringscope.agent.schema import Event, EventKind
from ringscope.gui.core.ingest.clocks import CLOCK_ALIGN_MIN_S

log = logging.getLogger(__name__)

LIVE_S: Final[float] = 30.0
"""An agent heard from within this long is asked; older ones are gone (their run ended or they were lost)."""
DEFAULT_WAIT_S: Final[float] = 3.0
"""How long a request waits for its agents by default (a live agent answers within ~0.1 s: its sender wakes every
50 ms); the tool may ask for longer (``wait_s``)."""
NATIVE_TIMEOUT_S: Final[float] = 10.0
"""Longest one ``py-spy dump`` may take."""
MAX_NATIVE: Final[int] = 16
"""Unanswering local processes read with py-spy per request at most (each costs ~0.5-1 s of a core)."""
ANSWER_KINDS: Final[dict[str, str]] = {STACKS: EventKind.STACKS, SET: EventKind.CONTROL, PROFILE: EventKind.PROFILE}
"""The ``Event.event`` value an agent answers each command with."""


@dataclass(slots=True)
class Route:
    """How to reach one agent, and who it is."""

    identity: bytes
    heard_s: float  # wall clock (the collector's receipt time of the agent's last message)
    run_id: str | None = None
    ranks: tuple[int, ...] = ()
    host: str = ""
    pid: int | None = None
    finished: bool = False
    configured: bool = False  # the collector's agent settings were sent to it (once per route)
    min_transit_s: float = float("inf")  # receipt - send time, smallest seen: the clock offset (+ one-way delay)

    @property
    def clock_offset_s(self) -> float:
        """What to add to this agent's wall times to put them on the collector's clock (0 when it is within
        ``CLOCK_ALIGN_MIN_S``, as the recorder's alignment does)."""
        offset = self.min_transit_s
        return offset if math.isfinite(offset) and abs(offset) >= CLOCK_ALIGN_MIN_S else 0.0


class Routes(dict[str, Route]):
    """agent_id -> ``Route``, kept by the collector's receive thread."""

    def heard(self, agent_id: str, identity: bytes, now: float) -> Route:
        route = self.get(agent_id)
        if route is None:
            route = self[agent_id] = Route(identity, now)
        else:
            route.identity, route.heard_s = identity, now
        return route

    def live(self, now: float, run_id: str | None, ranks: tuple[int, ...] | None) -> dict[str, Route]:
        """The agents a request for ``run_id`` (None: every run) and ``ranks`` (None: all) goes to."""
        wanted = set(ranks) if ranks is not None else None
        return {agent_id: route for agent_id, route in self.items()
                if now - route.heard_s <= LIVE_S and not route.finished
                and (run_id is None or route.run_id == run_id)
                and (wanted is None or wanted.intersection(route.ranks))}

    def run_ids(self, now: float) -> list[str]:
        return sorted({r.run_id for r in self.values() if r.run_id and now - r.heard_s <= LIVE_S})


@dataclass(slots=True)
class Pending:
    """One request in flight."""

    request_id: str  # the collector's own id (what agents see)
    tool: bytes  # routing identity of the tool that asked
    tool_request_id: str
    command: str
    run_id: str | None
    targets: dict[str, Route]
    opened_s: float
    deadline_s: float
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # agent_id -> one answer per rank
    native: dict[str, str] = field(default_factory=dict)  # agent_id -> py-spy output (or why there is none)
    native_thread: threading.Thread | None = None  # reading unanswering local ranks; the reply waits for it


@dataclass(frozen=True, slots=True)
class Reply:
    """A finished request: send ``body`` (``control.encode`` keywords) to ``tool``."""

    tool: bytes
    body: dict[str, Any]


class Requests:
    """The requests in flight (see the module docstring). ``local_host``: this machine's host name as agents report
    it, to know which unanswering agents ``py-spy`` can read."""

    def __init__(self, local_host: str, *, py_spy: str | None = None) -> None:
        self._local_host = local_host
        self._py_spy = py_spy if py_spy is not None else find_py_spy()
        self._pending: dict[str, Pending] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def open(self, tool: bytes, message: Control, targets: dict[str, Route], now: float) -> Pending:
        """Start a request to ``targets``; the caller sends each the returned ``request_id``."""
        wait = message.wait_s or DEFAULT_WAIT_S
        pending = Pending(uuid.uuid4().hex[:16], tool, message.request_id, message.command, message.run_id,
                          dict(targets), now, now + wait)
        self._pending[pending.request_id] = pending
        return pending

    def answer(self, agent_id: str, event: Event) -> None:
        """An agent's answer arrived (an ``Event`` of an ``ANSWER_KINDS`` kind); others are ignored."""
        if event.event not in ANSWER_KINDS.values() or not event.text:
            return
        try:
            body = json.loads(event.text)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        pending = self._pending.get(str(body.get("id", "")))
        if pending is None or agent_id not in pending.targets:
            return  # a late answer to a request already replied to: it is in the recording all the same
        body["rank"] = event.rank
        pending.answers.setdefault(agent_id, []).append(body)

    def due(self, now: float) -> list[Reply]:
        """Replies ready to send: requests every agent answered, and those past their deadline."""
        replies: list[Reply] = []
        for request_id, pending in list(self._pending.items()):
            if pending.native_thread is not None:
                if pending.native_thread.is_alive():
                    continue  # py-spy is still reading: the reply goes with what it read
            elif not all(self._complete(pending, agent_id) for agent_id in pending.targets) and \
                    now < pending.deadline_s:
                continue
            else:
                missing = [agent_id for agent_id in pending.targets if agent_id not in pending.answers]
                local = [a for a in missing if pending.targets[a].host == self._local_host and pending.targets[a].pid]
                if pending.command == STACKS and local:
                    pending.native_thread = threading.Thread(target=self._read_native,
                                                             args=(pending, local[:MAX_NATIVE]),
                                                             name="ringscope-py-spy", daemon=True)
                    pending.native_thread.start()
                    continue
            del self._pending[request_id]
            replies.append(self._reply(pending, now))
        return replies

    def _complete(self, pending: Pending, agent_id: str) -> bool:
        answers = pending.answers.get(agent_id)
        expected = 1 if pending.command == PROFILE else max(1, len(pending.targets[agent_id].ranks))
        return answers is not None and len(answers) >= expected

    def _read_native(self, pending: Pending, agent_ids: list[str]) -> None:
        """On its own thread: fills ``pending.native`` only (the collector's thread replies once it ended)."""
        for agent_id in agent_ids:
            pid = pending.targets[agent_id].pid
            pending.native[agent_id] = native_stacks(pid, self._py_spy) if pid else "no process id"

    def _reply(self, pending: Pending, now: float) -> Reply:
        ranks: list[dict[str, Any]] = []
        for agent_id, route in pending.targets.items():
            base = {"agent_id": agent_id, "run_id": route.run_id, "host": route.host, "pid": route.pid,
                    "clock_offset_s": route.clock_offset_s}
            answers = pending.answers.get(agent_id)
            if answers:
                for answer in answers:
                    ranks.append({**base, **answer, "answered": True})
                continue
            note = ("no answer: its agent did not run within the wait. The training thread may hold the GIL in "
                    "native code (a kernel, a collective, a C extension), or the process is stopped or swapping")
            if pending.command == PROFILE:
                note = ("no profile within the wait: the rank did not finish the profiled steps (slow steps, a "
                        "hang), or the trace export took longer; a late answer is still recorded")
            native = pending.native.get(agent_id)
            for rank in route.ranks or (None,):
                ranks.append({**base, "rank": rank, "answered": False, "note": note,
                              **({"native": native} if native is not None else {})})
        ranks.sort(key=lambda r: (r.get("run_id") or "", -1 if r.get("rank") is None else r["rank"]))
        result = {"command": pending.command, "run_id": pending.run_id, "asked": len(pending.targets),
                  "answered": len(pending.answers), "elapsed_s": round(now - pending.opened_s, 3),
                  "ts_s": time.time(), "ranks": ranks}
        return Reply(pending.tool, {"id": pending.tool_request_id, "ok": True, "result": result})


def find_py_spy() -> str:
    """py-spy on PATH, or beside this Python (a virtual environment that is not activated); '' when absent."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else "")


def _process_state(pid: int) -> str:
    """The one-letter state of a local process (R, S, D, T, Z...), '' when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def native_stacks(pid: int, py_spy: str) -> str:
    """``py-spy dump --native`` of ``pid``, or a sentence saying why it could not be read."""
    if not py_spy:
        return ("py-spy is not installed on the collector's host (pip install py-spy): no native stack; run "
                f"`py-spy dump --native --pid {pid}` where the process runs")
    if not os.path.exists(f"/proc/{pid}"):
        return f"process {pid} is not running on this host"
    try:
        done = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=NATIVE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"py-spy dump of process {pid} took over {NATIVE_TIMEOUT_S:.0f} s and was stopped"
    except OSError as exc:
        return f"py-spy could not run: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        # py-spy prints "Error: ..." and then a Rust backtrace: the error line is the one that says why
        why = next((line.strip() for line in lines if line.startswith("Error")), lines[0] if lines else
                   f"exit {done.returncode}")
        state = _process_state(pid)
        if state == "T":
            why += " (the process is stopped: SIGSTOP or a debugger)"
        hint = (" (ptrace is not permitted: run the collector as the same user with "
                "kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE)") if "ermission" in why else ""
        return f"py-spy dump of process {pid} failed: {why[:300]}{hint}"
    return done.stdout[-60_000:]
