"""What a patch is: metadata, an upstream detector, and an ``apply`` that records every change.

A patch never touches an engine object directly: it goes through ``PatchContext``, which keeps
the exact original object of every attribute it replaces so ``revert`` can put them all back,
including copies an engine bound elsewhere with ``from x import y``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

_MISSING = object()
_SWEEP = object()  # marks a rebind_globals record in the change log


class PatchStatus(StrEnum):
    """Where one patch stands in this process."""

    PENDING = "pending"  # its engine module is not imported yet; the import hook waits
    APPLIED = "applied"
    UPSTREAM = "upstream"  # the engine already has an equivalent: stood aside
    NOT_NEEDED = "not-needed"  # nothing to do in this engine version (e.g. model absent)
    UNSUPPORTED_VERSION = "unsupported-version"
    STOOD_ASIDE = "stood-aside"  # a clause of its contract fails on this release (the reason)
    DISABLED = "disabled"  # turned off by the user (VLM_FASTPATH*, apply(patches=...))
    FAILED = "failed"  # could not apply; the engine was left as it was
    FAULTED = "faulted"  # applied, then disabled for run-time faults in its fast path


@dataclass
class PatchResult:
    name: str
    engine: str
    status: PatchStatus
    reason: str = ""
    engine_version: str | None = None
    # Decided only for want of a dependency: re-evaluated whenever the registry applies.
    waiting: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "engine": self.engine,
            "status": self.status.value,
            "reason": self.reason,
            "engine_version": self.engine_version,
        }


def _globals_bound_to(obj: Any, prefixes: tuple[str, ...]) -> list[tuple[Any, str]]:
    """(module, name) of every global that *is* ``obj`` in modules under ``prefixes``."""
    found = []
    for mod_name, module in list(sys.modules.items()):
        if module is None or not mod_name.startswith(prefixes):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        found.extend((module, key) for key, value in list(namespace.items()) if value is obj)
    return found


class PatchContext:
    """Records every attribute a patch sets so that ``undo`` restores the originals."""

    def __init__(self) -> None:
        self._changes: list[tuple[Any, str, Any]] = []

    def set_attr(self, owner: Any, name: str, value: Any) -> Any:
        """Set ``owner.name = value`` and remember what was there. Returns the original."""
        original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING and hasattr(owner, name) and not isinstance(owner, type):
            original = getattr(owner, name)
        self._changes.append((owner, name, original))
        setattr(owner, name, value)
        return original

    def rebind_globals(
        self, original: Any, replacement: Any, module_prefixes: Iterable[str]
    ) -> list[str]:
        """Point every module global that *is* ``original`` at ``replacement``.

        Covers ``from m import f`` copies in other engine modules. Returns the rebound names.
        """
        prefixes = tuple(module_prefixes)
        # Recorded first so that ``undo`` (newest first) runs it last: modules imported while
        # the patch was active copied ``replacement``; the sweep points those back too.
        self._changes.append((_SWEEP, "", (original, replacement, prefixes)))
        rebound = []
        for module, key in _globals_bound_to(original, prefixes):
            self.set_attr(module, key, replacement)
            rebound.append(f"{module.__name__}.{key}")
        return rebound

    def undo(self) -> None:
        """Restore every recorded attribute, newest first."""
        while self._changes:
            owner, name, original = self._changes.pop()
            if owner is _SWEEP:
                self._sweep(*original)
            elif original is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, original)

    @staticmethod
    def _sweep(original: Any, replacement: Any, prefixes: tuple[str, ...]) -> None:
        for module, key in _globals_bound_to(replacement, prefixes):
            setattr(module, key, original)

    def __len__(self) -> int:
        return sum(1 for owner, _, _ in self._changes if owner is not _SWEEP)

    def slots(self) -> dict[tuple[int, str], str]:
        """Every attribute this context changed: ``(id(owner), name)`` -> a readable name.

        The registry compares slots to find patches stacked on the same attribute.
        """
        found = {}
        for owner, name, _ in self._changes:
            if owner is _SWEEP:
                continue
            label = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None)
            found[(id(owner), name)] = f"{label or type(owner).__name__}.{name}"
        return found


class Patch:
    """Base class: subclasses fill the metadata and implement the three hooks.

    Subclasses must not import their engine at module import time; the registry imports
    patch modules eagerly (cheaply) and engines only when a patch is applied.
    """

    name: ClassVar[str]
    engine: ClassVar[str]  # "vllm" or "sglang"
    # PEP 440 specifier of engine versions that need the patch. A lower bound only, as a rule:
    # a backport detects the release that has it (``upstream_equivalent``), and a patch that
    # puts our code in place of the engine's applies wherever ``contract`` holds. An upper
    # bound is kept only where a newer release's code cannot be told apart safely (the
    # folder's header says why).
    versions: ClassVar[str]
    # True: the patch carries an upstream change into older releases. False: our code in
    # place of the engine's (processors): no version cap, the contract decides.
    backport: ClassVar[bool] = True
    trigger: ClassVar[str]  # module whose import makes the patch applicable
    modules: ClassVar[tuple[str, ...]] = ()  # upstream modules it touches (doctor --module)
    upstream_pr: ClassVar[str] = ""  # "owner/repo#N" of the upstream change, or "" if none
    summary: ClassVar[str] = ""
    # Dependencies are data the registry checks (never comments):
    after: ClassVar[tuple[str, ...]] = ()  # apply after these (they wrap what we then wrap)
    requires: ClassVar[tuple[str, ...]] = ()  # each must be applied, else "not-needed"
    requires_any: ClassVar[tuple[str, ...]] = ()  # at least one must be applied
    # Why a quarantine must leave this patch's changes installed, or "" (they are reverted).
    # For a patch whose objects are the only reader of data already in flight (deferred
    # payloads): its contained calls answer with the engine-equivalent path once faulted.
    stays_when_faulted: ClassVar[str] = ""
    # Model architectures (as engines name them) whose processor this patch replaces once the
    # model loads: ``{architecture: ""}``, or ``{architecture: reason}`` for one it leaves to
    # the engine. Data for ``doctor`` (a patch hooked by processor class serves whatever model
    # holds that class); the engine suites check each listed model is served.
    models: ClassVar[Mapping[str, str]] = {}

    def upstream_equivalent(self) -> str | None:
        """Reason string if the running engine already does what this patch does."""
        return None

    def not_needed(self) -> str | None:
        """Reason string if there is nothing to patch in this engine (e.g. no such model)."""
        return None

    def contract(self) -> str | None:
        """The first clause of what the patch relies on that fails here, else None.

        Checked when the patch applies, on the installed code: ``"structure: ..."`` (the
        symbols it replaces or wraps exist with the signatures it expects) or
        ``"behaviour: ..."`` (ours equals the engine's own on probe inputs). A failing clause
        makes the patch stand aside (``stood-aside``) with the clause as its reason.
        """
        return None

    def apply(self, ctx: PatchContext) -> None:
        """Make the change through ``ctx``; raise to fail (the registry then undoes ``ctx``)."""
        raise NotImplementedError


def signature_clause(owner: Any, attr: str, params: tuple[str, ...]) -> str | None:
    """``structure: ...`` unless ``owner.attr`` is a function whose parameters start ``params``.

    ``**`` in ``params`` stands for a ``**kwargs`` parameter (any name).
    """
    import inspect

    label = f"{getattr(owner, '__name__', owner)}.{attr}"
    func = owner.__dict__.get(attr) if hasattr(owner, "__dict__") else None
    if func is None:
        func = getattr(owner, attr, None)
    if not callable(func):
        return f"structure: {label} is missing"
    try:
        found = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return f"structure: {label} has no readable signature"
    names = [
        "**" if p.kind is inspect.Parameter.VAR_KEYWORD else p.name for p in found
    ]
    if names[: len(params)] != list(params):
        return (
            f"structure: {label}({', '.join(names)}) is not ({', '.join(params)}, ...) "
            "as the patch expects"
        )
    return None


def source_text(obj: Any) -> str:
    """The installed source of ``obj`` (a contract reads what an engine function does), or ""
    where there is none to read (built-ins, a release shipped without its ``.py`` files)."""
    import inspect

    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""
