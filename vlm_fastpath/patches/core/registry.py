"""The registry of named patches: apply, revert and report them, never breaking the engine.

Every public entry point is thread-safe (one re-entrant lock), idempotent, and catches
everything a patch raises: a patch that cannot apply is undone, logged once, and reported as
``failed`` while the engine keeps running with its own code.

Order and dependencies are data on the patches (``after``, ``requires``, ``requires_any``):
patches apply in a topological order of those edges (catalog order breaks ties), a patch
whose requirement is not applied reports ``not-needed`` with the reason, and the registry keeps
every attribute's wrapper stack in that order. ``revert(patches=[x])`` also reverts every patch
stacked on top of x (applied later on one of the same attributes) and every patch that
requires x, so ``status()`` always describes what is really installed.

A patch whose fast path keeps failing at run time (:mod:`.containment`) is quarantined:
reverted with what requires it, reported as ``faulted`` for the rest of the process, and
never re-applied by a later ``apply()``; patches merely stacked on it go back on.

The registry holds the state and the lock; the rules live in :mod:`.decisions` (how one patch
is decided, for ``apply()`` and ``status()`` alike), :mod:`.stacks` (the wrapper stacks) and
:mod:`.status` (previews and the log).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterable

from ..._log import get_logger
from .base import Patch, PatchResult, PatchStatus
from .catalog import PATCH_FOLDERS, patch_modules
from .decisions import decide, topological_order, unmet_dependency
from .engine_versions import engine_version
from .stacks import WrapperStacks
from .status import log_outcomes, preview, with_models

logger = get_logger("vlm_fastpath.patches")

ENGINES = ("vllm", "sglang")


class PatchRegistry:
    """All known patches and their state in this process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._patches: dict[str, Patch] = {}
        self._results: dict[str, PatchResult] = {}
        self._stacks = WrapperStacks()
        self._order: list[Patch] | None = None
        self._cyclic: set[str] = set()
        self._logged: set[tuple[str, str]] = set()  # (name, status) already logged
        self._faulted: dict[str, str] = {}  # quarantined for run-time faults: name -> reason
        self._notes: dict[str, dict[str, str]] = {}  # per applied patch: what -> "" or reason
        self._loaded_catalog = False

    # -- registration -----------------------------------------------------------------
    def register(self, patch: Patch) -> Patch:
        with self._lock:
            existing = self._patches.get(patch.name)
            if existing is not None and type(existing) is not type(patch):
                raise ValueError(f"two patches are named {patch.name!r}")
            self._patches.setdefault(patch.name, patch)
            self._results.setdefault(
                patch.name, PatchResult(patch.name, patch.engine, PatchStatus.PENDING)
            )
            self._order = None
        return patch

    def load_catalog(self) -> None:
        """Import our patch folders and their modules (cheap: no engine import)."""
        with self._lock:
            if self._loaded_catalog:
                return
            self._loaded_catalog = True
            for folder in PATCH_FOLDERS:
                try:
                    modules = patch_modules(folder)
                except Exception as exc:  # noqa: BLE001 - a broken folder must not spread
                    logger.warning("vlm_fastpath: cannot load %s: %s", folder, exc)
                    continue
                for module_name in modules:
                    try:
                        importlib.import_module(module_name)
                    except Exception as exc:  # noqa: BLE001
                        logger.warning("vlm_fastpath: cannot load %s: %s", module_name, exc)

    def ordered(self) -> list[Patch]:
        """Every registered patch in apply order (dependencies first)."""
        with self._lock:
            if self._order is None:
                self._order, self._cyclic = topological_order(list(self._patches.values()))
                self._order += [self._patches[n] for n in self._patches if n in self._cyclic]
            return list(self._order)

    def patches(self, engine: str | None = None) -> list[Patch]:
        self.load_catalog()
        return [p for p in self.ordered() if engine in (None, p.engine)]

    def get(self, name: str) -> Patch:
        self.load_catalog()
        with self._lock:
            return self._patches[name]

    def touching(self, upstream_module: str) -> list[Patch]:
        """Every patch whose metadata says it changes ``upstream_module``."""
        return [p for p in self.patches() if upstream_module in (*p.modules, p.trigger)]

    # -- decisions (decisions.py) and stacks (stacks.py) ----------------------------------
    def _evaluate(self, patch: Patch, allowed: set[str] | None) -> PatchResult:
        decision = decide(patch, allowed, self._results, self._cyclic)
        result = decision.result
        if not decision.install:
            return result
        position = {p.name: i for i, p in enumerate(self.ordered())}
        failure, not_restacked = self._stacks.install(patch, position, self._patches)
        self._mark_not_restacked(not_restacked)
        if failure:
            result.status, result.reason = PatchStatus.FAILED, failure
            logger.warning(
                "vlm_fastpath: patch %s not applied (%s); %s left untouched",
                patch.name,
                failure,
                patch.engine,
            )
            return result
        result.status = PatchStatus.APPLIED
        unverified = decision.unverified
        result.reason = patch.summary + (f" ({unverified}; contract held)" if unverified else "")
        return result

    def _mark_not_restacked(self, failed: dict[str, str]) -> None:
        for name, failure in failed.items():
            patch = self._patches[name]
            self._results[name] = PatchResult(
                name, patch.engine, PatchStatus.FAILED, f"re-stacking failed: {failure}",
                engine_version(patch.engine),
            )

    # -- public operations ---------------------------------------------------------------
    def apply(
        self,
        engine: str | None = None,
        patches: Iterable[str] | None = None,
        *,
        trigger: str | None = None,
    ) -> list[PatchResult]:
        """Apply every eligible patch whose trigger module is imported; idempotent.

        ``trigger`` (the import hook's) limits the pass to patches of that module, plus those
        waiting for a dependency, which are re-decided on every pass.
        """
        allowed = set(patches) if patches is not None else None
        changed: list[PatchResult] = []
        with self._lock:
            for patch in self.patches(engine):
                current = self._results[patch.name]
                if current.status is PatchStatus.APPLIED or patch.name in self._faulted:
                    continue
                if trigger is not None and patch.trigger != trigger and not current.waiting:
                    continue
                if current.status is not PatchStatus.PENDING and allowed is None:
                    if not current.waiting:
                        continue  # already decided in this process
                result = self._evaluate(patch, allowed)
                if (
                    result.status is not current.status
                    or result.reason != current.reason
                    or result.waiting != current.waiting
                ):
                    self._results[patch.name] = result
                    if result.status is not PatchStatus.PENDING:
                        changed.append(result)
            if changed:
                log_outcomes(logger, self._logged, changed)
            return [self._results[p.name] for p in self.patches(engine)]

    def revert(
        self, engine: str | None = None, patches: Iterable[str] | None = None
    ) -> list[str]:
        """Undo patches (restoring the exact original objects) and forget their decisions.

        With ``patches``, every applied patch stacked on one of them (applied later on one of
        the same attributes) or requiring one of them is reverted too: a wrapper is never left
        in place under a reverted one. Returns the names of the patches taken off, and logs
        the ones that were not asked for.
        """
        wanted = set(patches) if patches is not None else None
        with self._lock:
            selected = [p.name for p in self.patches(engine)]
            if wanted is not None:
                selected = [n for n in selected if n in wanted]
            applied = [n for n in self._stacks.applied if n in selected]
            off = (self._stacks.take_off(self._stacks.closure(applied, self._patches))
                   if applied else [])
            extra = [n for n in off if n not in selected]
            if extra:
                logger.info(
                    "vlm_fastpath: also reverted %s (stacked on or requiring %s)",
                    ", ".join(extra),
                    ", ".join(n for n in off if n in selected),
                )
            for name in {*selected, *off}:
                self._notes.pop(name, None)
                if name in self._faulted:
                    continue  # stays reported as faulted for the process
                patch = self._patches[name]
                reason = "reverted with " + ", ".join(selected) if name in extra else ""
                self._results[name] = PatchResult(
                    name, patch.engine, PatchStatus.PENDING, reason
                )
            return off

    def quarantine(self, name: str, reason: str) -> list[str]:
        """Take ``name`` off for good (run-time faults) and report it ``faulted``.

        Patches that require it are reverted and report ``not-needed``; patches only stacked
        on it are put back on top of what remains. Returns the names reverted for good. A
        patch with ``stays_when_faulted`` keeps its changes installed (its contained calls
        answer with the engine-equivalent path from now on) and is reported ``faulted``.
        """
        with self._lock:
            patch = self.get(name)  # loads the catalog when nothing has yet
            self._faulted[name] = reason
            if patch.stays_when_faulted and name in self._stacks.applied:
                reason = f"{reason}; left installed: {patch.stays_when_faulted}"
                self._faulted[name] = reason
                self._results[name] = PatchResult(
                    name, patch.engine, PatchStatus.FAULTED, reason, engine_version(patch.engine)
                )
                logger.warning("vlm_fastpath (pid %d): patch %s disabled: %s", os.getpid(),
                               name, reason)
                return [name]
            stacks = self._stacks
            lifted = (stacks.take_off(stacks.closure([name], self._patches))
                      if name in stacks.applied else [])
            self._results[name] = PatchResult(
                name, patch.engine, PatchStatus.FAULTED, reason, engine_version(patch.engine)
            )
            gone = [name]
            for other in lifted:
                if other == name:
                    continue
                unmet = unmet_dependency(self._patches[other], self._results, self._cyclic)
                if unmet is None:
                    self._mark_not_restacked(stacks.put_back([other], self._patches))
                    continue
                gone.append(other)
                self._results[other] = PatchResult(
                    other, self._patches[other].engine, PatchStatus.NOT_NEEDED, unmet[1],
                    engine_version(self._patches[other].engine),
                )
            logger.warning(
                "vlm_fastpath (pid %d): patch %s disabled: %s%s", os.getpid(), name, reason,
                f"; also reverted {', '.join(gone[1:])}" if len(gone) > 1 else "",
            )
            return gone

    def clear_faults(self) -> None:
        """Forget quarantines (tests): faulted patches become pending again (applied, for
        one left installed)."""
        with self._lock:
            for name in self._faulted:
                patch = self._patches[name]
                if name in self._stacks.applied:
                    self._results[name] = PatchResult(
                        name, patch.engine, PatchStatus.APPLIED, patch.summary,
                        engine_version(patch.engine),
                    )
                else:
                    self._results[name] = PatchResult(name, patch.engine, PatchStatus.PENDING)
            self._faulted.clear()

    def note_stand_aside(self, name: str, what: str, reason: str) -> None:
        """Say in an applied patch's status that one object it would hand out stays the
        engine's (a per-object contract clause failed at hand-out time)."""
        self.note_model(name, what, reason)

    def note_model(self, name: str, what: str, reason: str = "") -> None:
        """Record what an applied patch does for one model (or object) it met at hand-out:
        serves it (``reason`` empty) or keeps the engine's processor for it (``reason``).
        ``status()`` reports every record; a patch that met models and serves none of them
        reports ``stood-aside``. Cheap when nothing changed (called per hand-out)."""
        notes = self._notes.get(name)
        if notes is not None and notes.get(what) == reason:
            return
        with self._lock:
            result = self._results.get(name)
            if result is not None and result.status is PatchStatus.APPLIED:
                self._notes.setdefault(name, {})[what] = reason

    def served(self, name: str) -> dict[str, str]:
        """The models (or objects) ``name`` met: ``{what: ""}`` served, ``{what: reason}``
        kept the engine's processor."""
        with self._lock:
            return dict(self._notes.get(name, {}))

    def installed(self) -> list[str]:
        """Applied patches, in the order they are stacked (oldest first)."""
        with self._lock:
            return list(self._stacks.applied)

    def status(self, engine: str | None = None) -> list[PatchResult]:
        """Current state of every patch; one still pending is previewed by the same first
        steps ``apply()`` decides by (:func:`.status.preview`)."""
        with self._lock:
            out = []
            for patch in self.patches(engine):
                result = self._results[patch.name]
                if result.status is PatchStatus.PENDING and not result.waiting:
                    result = preview(patch, result)
                elif result.status is PatchStatus.APPLIED and self._notes.get(patch.name):
                    result = with_models(result, self._notes[patch.name])
                out.append(result)
            return out


REGISTRY = PatchRegistry()


def _reset_lock_after_fork() -> None:
    # A lock held by another thread at fork time would deadlock the child forever.
    REGISTRY._lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_lock_after_fork)


def register(patch_cls: type[Patch]) -> type[Patch]:
    """Class decorator: instantiate and register a patch."""
    REGISTRY.register(patch_cls())
    return patch_cls
