"""Run a callback right after a watched module finishes importing.

Used so a patch lands the moment its engine module exists, in every process, without our code
importing the engine itself (importing engine modules early has crashed vLLM CPU workers).
Only the watched names go through this finder; every other import is untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[str], None]


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader and calls back once the module body has run."""

    def __init__(self, loader: Any, callback: Callback) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._callback(module.__name__)
        except Exception:  # noqa: BLE001 - an import must never fail because of us
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loader of watched modules."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._watched: dict[str, list[Callback]] = {}
        self._busy = threading.local()

    def watch(self, module_name: str, callback: Callback) -> bool:
        """Call ``callback(name)`` after ``module_name`` imports; now if it already has.

        Returns True if the module was already imported (callback already called).
        """
        with self._lock:
            if module_name in sys.modules:
                already = True
            else:
                callbacks = self._watched.setdefault(module_name, [])
                if callback not in callbacks:
                    callbacks.append(callback)
                already = False
        if already:
            callback(module_name)
        return already

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        with self._lock:
            callbacks = self._watched.get(fullname)
        if not callbacks:
            return None
        busy = getattr(self._busy, "names", None)
        if busy is None:
            busy = self._busy.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:  # noqa: BLE001
            return None
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _NotifyingLoader(spec.loader, self._notify)
        return spec

    def _notify(self, name: str) -> None:
        with self._lock:
            callbacks = self._watched.pop(name, [])
        for callback in callbacks:
            try:
                callback(name)
            except Exception:  # noqa: BLE001
                pass


_FINDER: PostImportFinder | None = None
_FINDER_LOCK = threading.Lock()


def _reset_locks_after_fork() -> None:
    global _FINDER_LOCK
    _FINDER_LOCK = threading.Lock()
    if _FINDER is not None:
        _FINDER._lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_locks_after_fork)


def finder() -> PostImportFinder:
    """The process-wide finder, installed at the front of ``sys.meta_path`` on first use."""
    global _FINDER
    with _FINDER_LOCK:
        if _FINDER is None or _FINDER not in sys.meta_path:
            _FINDER = _FINDER or PostImportFinder()
            sys.meta_path.insert(0, _FINDER)
        return _FINDER


def when_imported(module_name: str, callback: Callback) -> bool:
    """Run ``callback(module_name)`` once that module is imported (now, if it is)."""
    return finder().watch(module_name, callback)
