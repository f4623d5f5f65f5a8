"""The shape of the house: no import circle anywhere in the ``ringscope`` package, and no source file over
``MAX_LINES`` lines. Reads the code (grimp builds the import graph from the source files); imports nothing of it."""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("agent", "gui", "trainers", "src", "benchmarks")
MAX_LINES = 550
"""Past this a file holds several concerns; split it by concern (the house style says split past ~400)."""


def test_no_import_circle_between_modules() -> None:
    graph = grimp.build_graph("ringscope", cache_dir=None)
    circles = _circles({module: graph.find_modules_directly_imported_by(module) for module in graph.modules})
    assert not circles, "modules that import each other, directly or round a circle (lazy imports included): " + \
        "; ".join(" <-> ".join(sorted(circle)) for circle in circles)


def test_no_source_file_is_over_the_line_limit() -> None:
    files = {path.resolve() for folder in SOURCE_FOLDERS for path in (ROOT / folder).rglob("*.py")}
    lines = {path.relative_to(ROOT): len(path.read_text(encoding="utf-8").splitlines()) for path in files
             if not path.name.startswith("test_") and "tests" not in path.relative_to(ROOT).parts}
    too_long = sorted(f"{path} ({count} lines)" for path, count in lines.items() if count > MAX_LINES)
    assert not too_long, f"files over {MAX_LINES} lines (split them by concern): " + ", ".join(too_long)


def _circles(imports: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(imports):
        if start in index:
            continue
        work = [(start, iter(sorted(imports[start] & imports.keys())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports[target] & imports.keys()))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(component)
    return found
