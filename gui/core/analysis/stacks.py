"""A stack dump on demand, as people read one: identical stacks folded, with how many ranks share each.

Input is the ``result`` map a collector returns for a ``stacks`` request (``ringscope.gui.core.ingest.requests``):
one entry per rank, with its threads (the training thread first) or, for a rank whose agent did not answer, why
not and what ``py-spy dump --native`` read from outside. The same folding serves ``ringscope stacks``, the window's
stack view and the reports; nothing here imports Qt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringscope.agent.schema import Event, EventKind

Frame = tuple[str, int, str, str]  # file, line, function, source line


@dataclass(frozen=True, slots=True)
class StackGroup:
    """Ranks whose thread (``thread``: the training thread, or a named other thread) had the same stack."""

    thread: str
    frames: tuple[Frame, ...]
    ranks: tuple[int, ...]
    runs: tuple[str, ...]
    training: bool
    phases: tuple[str, ...] = ()

    @property
    def innermost(self) -> str:
        """Where the thread is: the innermost function and its place."""
        if not self.frames:
            return "(no Python frame)"
        file, line, function, _ = self.frames[-1]
        return f"{function} ({_short(file)}:{line})"


@dataclass(frozen=True, slots=True)
class Unanswered:
    """Ranks whose agent did not answer, with why and what was read from outside (py-spy), if anything."""

    rank: int | None
    run_id: str
    host: str
    pid: int | None
    note: str
    native: str | None


@dataclass(frozen=True, slots=True)
class FoldedStacks:
    """A folded dump: training-thread groups (largest first), other threads' groups, ranks that did not answer."""

    training: tuple[StackGroup, ...]
    others: tuple[StackGroup, ...]
    unanswered: tuple[Unanswered, ...]
    ranks: int
    elapsed_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def fold(result: dict[str, Any]) -> FoldedStacks:
    """Fold the per-rank stacks of a ``stacks`` result (see the module docstring)."""
    training: dict[tuple[Frame, ...], list[tuple[int, str, str]]] = {}
    others: dict[tuple[str, tuple[Frame, ...]], list[tuple[int, str, str]]] = {}
    unanswered: list[Unanswered] = []
    entries = [e for e in result.get("ranks", []) if isinstance(e, dict)]
    for entry in entries:
        rank = entry.get("rank")
        run_id = str(entry.get("run_id") or "")
        if not entry.get("answered"):
            unanswered.append(Unanswered(rank, run_id, str(entry.get("host") or ""), entry.get("pid"),
                                         str(entry.get("note") or ""), entry.get("native")))
            continue
        who = (-1 if rank is None else int(rank), run_id, str(entry.get("phase") or ""))
        threads = [t for t in entry.get("threads", []) if isinstance(t, dict)]
        main = next((t for t in threads if t.get("training")), None)
        if main is None and threads:  # no step seen yet: the process's main thread stands in
            main = next((t for t in threads if t.get("name") == "MainThread"), None)
        if main is not None:
            training.setdefault(_frames(main), []).append(who)
        for thread in threads:
            if thread is main or not thread.get("frames"):
                continue
            others.setdefault((_thread_name(thread), _frames(thread)), []).append(who)
    groups = [_group("training thread", frames, whos, True) for frames, whos in training.items()]
    other_groups = [_group(name, frames, whos, False) for (name, frames), whos in others.items()]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    other_groups.sort(key=lambda g: (g.thread.startswith("ringscope"), -len(g.ranks), g.thread))
    return FoldedStacks(tuple(groups), tuple(other_groups), tuple(unanswered), len(entries),
                        result.get("elapsed_s"))


def result_from_events(events: Sequence[Event], run_id: str | None = None) -> dict[str, Any] | None:
    """The latest stack dump a recording holds (the agents' ``stacks`` events of one request), as a ``stacks``
    result ``fold`` takes; None when there is none. Ranks that did not answer are not in a recording."""
    dumps: dict[str, list[tuple[Event, dict[str, Any]]]] = {}
    for event in events:
        if event.event != EventKind.STACKS or not event.text:
            continue
        try:
            body = json.loads(event.text)
        except ValueError:
            continue
        if isinstance(body, dict):
            dumps.setdefault(str(body.get("id", "")), []).append((event, body))
    if not dumps:
        return None
    latest = max(dumps.values(), key=lambda answers: max(e.ts_s for e, _ in answers))
    ranks = [{**body, "rank": event.rank, "run_id": run_id, "answered": True} for event, body in latest]
    return {"command": "stacks", "run_id": run_id, "asked": len(ranks), "answered": len(ranks),
            "ts_s": max(e.ts_s for e, _ in latest), "ranks": ranks}


def render_text(folded: FoldedStacks, *, other_threads: bool = True, max_frames: int = 30) -> str:
    """The folded dump as plain text (innermost call last, as Python prints tracebacks)."""
    lines: list[str] = []
    answered = folded.ranks - len(folded.unanswered)
    took = f" in {folded.elapsed_s:.2f} s" if folded.elapsed_s is not None else ""
    lines.append(f"{answered} of {folded.ranks} rank(s) answered{took}; "
                 f"{len(folded.training)} distinct training-thread stack(s)")
    for index, group in enumerate(folded.training, 1):
        lines.append("")
        phases = f", phase {'/'.join(group.phases)}" if group.phases else ""
        lines.append(f"[{index}] {len(group.ranks)} rank(s) {rank_ranges(group.ranks)}{_runs(group)}{phases}: "
                     f"training thread in {group.innermost}")
        lines.extend(_frame_lines(group.frames, max_frames))
    for item in folded.unanswered:
        lines.append("")
        lines.append(f"rank {item.rank} (pid {item.pid} on {item.host or '?'}): {item.note}")
        if item.native:
            lines.append("  native stack (py-spy dump --native):")
            lines.extend("    " + line for line in item.native.rstrip().splitlines()[:200])
    if other_threads and folded.others:
        lines.append("")
        lines.append("Other threads:")
        for group in folded.others:
            lines.append(f"  {group.thread}: {len(group.ranks)} rank(s) {rank_ranges(group.ranks)}, in "
                         f"{group.innermost}")
    return "\n".join(lines)


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = previous = None
    for rank in ordered:
        if start is None:
            start = previous = rank
        elif rank == previous + 1:  # type: ignore[operator]
            previous = rank
        else:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
            start = previous = rank
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def parse_rank_list(text: str) -> list[int]:
    """``"0,3,5-7"`` -> ``[0, 3, 5, 6, 7]`` (the inverse of ``rank_ranges``); ``ValueError`` saying what is wrong."""
    ranks: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            first, last = -1, -1
        if first < 0 or last < first or last - first > 65_536:
            raise ValueError(f"{text!r} is not a list of ranks like 0,3,5-7: {part.strip()!r} is not a rank or a "
                             "rising range")
        ranks.extend(range(first, last + 1))
    return ranks


def _frame_lines(frames: tuple[Frame, ...], max_frames: int) -> list[str]:
    shown = frames[-max_frames:]
    lines = [f"    ... {len(frames) - len(shown)} outer frame(s)"] if len(shown) < len(frames) else []
    for file, line, function, source in shown:
        lines.append(f"  {_short(file)}:{line} in {function}")
        if source:
            lines.append(f"      {source.strip()}")
    return lines


def _group(thread: str, frames: tuple[Frame, ...], whos: list[tuple[int, str, str]], training: bool) -> StackGroup:
    # a process with several agents (or ranks) shows its other threads in every rank's answer: count ranks once
    return StackGroup(thread, frames, tuple(sorted({w[0] for w in whos})), tuple(sorted({w[1] for w in whos})),
                      training, tuple(sorted({w[2] for w in whos if w[2]})))


def _frames(thread: dict[str, Any]) -> tuple[Frame, ...]:
    frames = []
    for frame in thread.get("frames", []):
        if isinstance(frame, list | tuple) and len(frame) == 4:
            frames.append((str(frame[0]), int(frame[1] or 0), str(frame[2]), str(frame[3] or "")))
    return tuple(frames)


def _thread_name(thread: dict[str, Any]) -> str:
    name = str(thread.get("name") or "?")
    # numbered worker names ("Thread-3 (worker)") fold together
    return name.split(" (")[0].rstrip("0123456789-_") + (" (" + name.split(" (", 1)[1] if " (" in name else "")


def _runs(group: StackGroup) -> str:
    return f" of {', '.join(group.runs)}" if len(group.runs) > 1 else ""


def _short(path: str) -> str:
    """The part of a path a reader recognises: from ``site-packages/`` on, or the last two components."""
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    parts = path.rsplit("/", 2)
    return "/".join(parts[-2:]) if len(parts) > 1 else path
