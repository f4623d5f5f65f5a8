"""Ringscope's zero-code bootstrap, run by Python at start-up in every process that has this directory on
``PYTHONPATH`` (``ringscope run`` and the launch dialog put it there).

What it does, with the standard library only (importing ``agent`` costs ~0.1 s and would shadow a user module of
that name, so nothing of Ringscope is imported here):

1. Unless ``RINGSCOPE_DISABLE=1``, it installs a ``sys.meta_path`` finder that watches for ``torch``,
   ``tensorflow`` and ``keras``. It finds nothing itself: it lets the real finders locate those modules and wraps
   the loader's ``exec_module`` so that, once the framework has *finished* importing, it calls
   ``ringscope.agent.inject.torch_patch.install()`` (torch) or ``ringscope.agent.inject.tf_patch.install()``
   (tensorflow and keras,
   when both are done). A process that never imports a framework pays for one finder and nothing else.
2. It runs the ``sitecustomize`` this one shadows (the next one on ``sys.path``), as Python would have.

What it must never do: raise, print more than one line, or change how the user's program runs when something
fails. Every failure is reported once on stderr as ``ringscope: zero-code instrumentation is off in this process
(...)`` and the program continues without Ringscope. ``RINGSCOPE_INJECT_FAULT=bootstrap|import`` forces such a
failure (tests use it to prove a broken injection leaves the training untouched).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_DISABLE = "RINGSCOPE_DISABLE"
_FAULT = "RINGSCOPE_INJECT_FAULT"
# set on the ``sys`` module: one line per process, shared with ringscope.agent.inject
_OFF_FLAG = "_ringscope_zero_code_off"
# installer module -> the framework modules that must all have finished importing before it runs
_INSTALLERS: dict[str, tuple[str, ...]] = {
    "ringscope.agent.inject.torch_patch": ("torch",),
    "ringscope.agent.inject.tf_patch": ("tensorflow", "keras"),
}


def _off(reason: str) -> None:
    """Report once per process that zero-code instrumentation is off, and why (never raises)."""
    try:
        if getattr(sys, _OFF_FLAG, False):
            return
        setattr(sys, _OFF_FLAG, True)
        sys.stderr.write(f"ringscope: zero-code instrumentation is off in this process ({reason}); "
                         "the program runs without it\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not stop the program
        pass


class _FrameworkWatcher(importlib.abc.MetaPathFinder):
    """Calls the installers once the frameworks they need have finished importing. Finds no module itself."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._finding: set[str] = set()
        self._done: set[str] = set()
        self._installed: set[str] = set()
        self._watched = {name for needed in _INSTALLERS.values() for name in needed}

    # ---- importlib protocol ------------------------------------------------------------------------------------

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        """Let the other finders locate a watched module, then hook its loader; None for every other module."""
        if fullname not in self._watched or fullname in self._finding or getattr(sys, _OFF_FLAG, False):
            return None
        with self._lock:
            self._finding.add(fullname)
            try:
                spec = self._find_elsewhere(fullname, path, target)
            finally:
                self._finding.discard(fullname)
        if spec is not None:
            self._hook_loader(fullname, spec)
        return spec

    # ---- Internals ---------------------------------------------------------------------------------------------

    def _find_elsewhere(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None) -> Any:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _hook_loader(self, fullname: str, spec: Any) -> None:
        loader = spec.loader
        original: Callable[[ModuleType], None] | None = getattr(loader, "exec_module", None)
        if original is None:
            return
        watcher = self

        def exec_module(module: ModuleType) -> None:
            original(module)  # the framework's own import: its errors are the user's, unchanged
            try:
                del loader.exec_module  # back to the loader's own method
            except AttributeError:
                pass
            watcher.finished(fullname)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attributes: the installer runs on next chance
            return

    def finished(self, fullname: str) -> None:
        """``fullname`` finished importing: run every installer whose frameworks are now all there."""
        with self._lock:
            self._done.add(fullname)
            ready = [name for name, needed in _INSTALLERS.items()
                     if name not in self._installed and all(m in self._done for m in needed)]
            self._installed.update(ready)
        for installer in ready:
            _run_installer(installer)


def _run_installer(name: str) -> None:
    if getattr(sys, _OFF_FLAG, False):
        return
    try:
        if os.environ.get(_FAULT, "").strip() == "import":
            raise ImportError(f"{_FAULT}=import: simulated failure to import {name}")
        importlib.import_module(name).install()
    except Exception as exc:  # never into the user's import statement
        _off(f"{name}: {type(exc).__name__}: {exc}")


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` that this one shadows, as ``site`` would have (errors printed, not raised)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.execsitecustomize does with a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")


def _bootstrap() -> None:
    if os.environ.get(_DISABLE, "").strip() in {"1", "true", "yes"}:  # as ringscope.agent.runtime reads it
        return  # asked for: silent here (``ringscope run`` says it once)
    try:
        if os.environ.get(_FAULT, "").strip() == "bootstrap":
            raise RuntimeError(f"{_FAULT}=bootstrap: simulated failure of the start-up hook")
        watcher = _FrameworkWatcher()
        sys.meta_path.insert(0, watcher)
        for name in list(watcher._watched):  # a framework imported before us (a .pth file): counts as done
            if name in sys.modules:
                watcher.finished(name)
    except Exception as exc:
        _off(f"start-up hook: {type(exc).__name__}: {exc}")


_bootstrap()
try:
    _chain_next_sitecustomize()
except Exception as _exc:  # finding the next sitecustomize must not stop the program either
    sys.stderr.write(f"ringscope: could not run the next sitecustomize: {_exc}\n")
