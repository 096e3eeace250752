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
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .. import settings
from .._log import get_logger
from .base import Patch, PatchContext, PatchResult, PatchStatus
from .catalog import PATCH_FOLDERS
from .engine_versions import engine_version, release_of
from .fingerprint import code_fingerprint, verified_releases

logger = get_logger("vlm_fastpath.patches")

ENGINES = ("vllm", "sglang")


def trigger_absent(trigger: str) -> bool:
    """True when the engine is loaded far enough to tell that ``trigger`` does not exist.

    Only asks when the trigger's parent package is already imported, so the check never
    imports engine code itself.
    """
    parent = trigger.rpartition(".")[0]
    if not parent or parent not in sys.modules:
        return False
    try:
        return importlib.util.find_spec(trigger) is None
    except (ImportError, ValueError):
        return False


def unverified_note(patch: Patch, version: str) -> str:
    """Empty where the release sweep verified ``patch`` on this release, else a note saying not.

    The note names a verified release whose patched code is byte-identical, where one is.
    """
    release = str(release_of(version) or version)
    recorded = verified_releases(patch.engine, patch.name)
    if release in recorded:
        return ""
    note = f"{patch.engine} {release} not verified by the sweep"
    if recorded:
        mine = code_fingerprint(patch.modules)
        same = sorted((r for r, f in recorded.items() if f == mine), key=release_key)
        if same:
            note += f"; its patched code equals verified {same[-1]}"
    return note


def release_key(release: str) -> tuple[int, object]:
    parsed = release_of(release)
    return (0, release) if parsed is None else (1, parsed)


def globally_disabled() -> bool:
    """``VLM_FASTPATH=0`` (or false/off/no) turns every patch off."""
    return not settings.enabled()


def patch_modules(folder: str) -> tuple[str, ...]:
    """The patch modules of one folder, in the order its ``__init__`` lists them."""
    package = importlib.import_module(folder)
    return tuple(f"{folder}.{name}" for name in getattr(package, "PATCH_MODULES", ()))


def dependencies(patch: Patch) -> tuple[str, ...]:
    return (*patch.after, *patch.requires, *patch.requires_any)


def topological_order(patches: list[Patch]) -> tuple[list[Patch], set[str]]:
    """``patches`` ordered so every dependency comes first (ties: the given order).

    Returns the order and the names caught in a dependency cycle (left out of the order).
    Dependencies on names that are not registered impose no order.
    """
    by_name = {p.name: p for p in patches}
    index = {p.name: i for i, p in enumerate(patches)}
    indegree = {p.name: 0 for p in patches}
    dependents: dict[str, list[str]] = {p.name: [] for p in patches}
    for patch in patches:
        for dep in set(dependencies(patch)):
            if dep in by_name and dep != patch.name:
                indegree[patch.name] += 1
                dependents[dep].append(patch.name)
    ready = sorted((n for n, d in indegree.items() if d == 0), key=index.__getitem__)
    order: list[Patch] = []
    while ready:
        name = ready.pop(0)
        order.append(by_name[name])
        for child in dependents[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
        ready.sort(key=index.__getitem__)
    cyclic = {n for n, d in indegree.items() if d > 0}
    return order, cyclic


class PatchRegistry:
    """All known patches and their state in this process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._patches: dict[str, Patch] = {}
        self._results: dict[str, PatchResult] = {}
        self._contexts: dict[str, PatchContext] = {}
        self._applied_seq: list[str] = []  # applied patches, oldest first
        self._order: list[Patch] | None = None
        self._cyclic: set[str] = set()
        self._logged: set[tuple[str, str]] = set()  # (name, status) already logged
        self._faulted: dict[str, str] = {}  # quarantined for run-time faults: name -> reason
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

    # -- decisions ----------------------------------------------------------------------
    def _user_disabled(self, patch: Patch, allowed: set[str] | None) -> str | None:
        if globally_disabled():
            return "VLM_FASTPATH=0"
        only = settings.only_patches()
        if only is not None and patch.name not in only:
            return "not listed in VLM_FASTPATH_PATCHES"
        skip = settings.skipped_patches()
        if skip is not None and patch.name in skip:
            return "listed in VLM_FASTPATH_SKIP"
        if allowed is not None and patch.name not in allowed:
            return "not selected by apply(patches=...)"
        return None

    def _describe(self, name: str) -> str:
        state = self._results.get(name)
        if state is None:
            return f"{name}: not registered"
        return f"{name}: {state.status.value}"

    def _unmet_dependency(self, patch: Patch) -> tuple[PatchStatus, str] | None:
        """Why ``patch`` must wait (pending) or stand aside (not-needed) for a dependency."""
        if patch.name in self._cyclic:
            return PatchStatus.FAILED, "dependency cycle through " + ", ".join(sorted(self._cyclic))
        for dep in patch.requires:
            state = self._results.get(dep)
            if state is None or state.status is not PatchStatus.APPLIED:
                if state is not None and state.status is PatchStatus.PENDING:
                    return PatchStatus.PENDING, f"waiting for {dep}, which it requires"
                return PatchStatus.NOT_NEEDED, f"requires {self._describe(dep)}"
        if patch.requires_any:
            states = [self._results.get(dep) for dep in patch.requires_any]
            if not any(s is not None and s.status is PatchStatus.APPLIED for s in states):
                names = ", ".join(patch.requires_any)
                if any(s is not None and s.status is PatchStatus.PENDING for s in states):
                    return PatchStatus.PENDING, f"waiting for one of {names}"
                seen = "; ".join(self._describe(dep) for dep in patch.requires_any)
                return PatchStatus.NOT_NEEDED, f"needs one of {names} applied ({seen})"
        return None

    def _evaluate(self, patch: Patch, allowed: set[str] | None) -> PatchResult:
        version = engine_version(patch.engine)
        result = PatchResult(patch.name, patch.engine, PatchStatus.PENDING, "", version)
        disabled = self._user_disabled(patch, allowed)
        if disabled:
            result.status, result.reason = PatchStatus.DISABLED, disabled
            return result
        if version is None:
            result.reason = f"{patch.engine} is not installed"
            return result
        if patch.trigger not in sys.modules:
            if trigger_absent(patch.trigger):
                result.status = PatchStatus.NOT_NEEDED
                result.reason = f"{patch.engine} {version} has no module {patch.trigger}"
            else:
                result.reason = f"waiting for {patch.trigger} to be imported"
            return result
        try:
            upstream = patch.upstream_equivalent()
            if upstream:
                result.status, result.reason = PatchStatus.UPSTREAM, upstream
                return result
            release = release_of(version)
            try:
                in_range = release is not None and release in SpecifierSet(patch.versions)
            except InvalidSpecifier:
                in_range = False
            if not in_range:
                result.status = PatchStatus.UNSUPPORTED_VERSION
                result.reason = f"{patch.engine} {version} is outside {patch.versions}"
                return result
            unmet = self._unmet_dependency(patch)
            if unmet is not None:
                result.status, result.reason = unmet
                result.waiting = True
                return result
            not_needed = patch.not_needed()
            if not_needed:
                result.status, result.reason = PatchStatus.NOT_NEEDED, not_needed
                return result
            unverified = unverified_note(patch, version)
            clause = patch.contract()
            if clause:
                result.status = PatchStatus.STOOD_ASIDE
                result.reason = f"contract not met: {clause}" + (
                    f" ({unverified})" if unverified else ""
                )
                return result
        except Exception as exc:  # noqa: BLE001 - a detector bug must not break the engine
            result.status = PatchStatus.FAILED
            result.reason = f"detector raised {type(exc).__name__}: {exc}"
            return result
        failure = self._install(patch)
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
        result.reason = patch.summary + (f" ({unverified}; contract held)" if unverified else "")
        return result

    # -- the wrapper stacks ---------------------------------------------------------------
    def _run_apply(self, patch: Patch) -> tuple[PatchContext | None, str]:
        ctx = PatchContext()
        try:
            patch.apply(ctx)
        except Exception as exc:  # noqa: BLE001
            ctx.undo()
            return None, f"{type(exc).__name__}: {exc}"
        return ctx, ""

    def _install(self, patch: Patch) -> str:
        """Apply ``patch`` in its place in the order; returns a failure reason or "".

        If a patch that comes later in the order already wraps one of the attributes this one
        changes, those patches are taken off first and put back on top afterwards, so every
        attribute's stack follows the order whatever order the triggers imported in.
        """
        ctx, failure = self._run_apply(patch)
        if ctx is None:
            return failure
        position = {p.name: i for i, p in enumerate(self.ordered())}
        mine = position.get(patch.name, len(position))
        later = [n for n in self._applied_seq if position.get(n, -1) > mine]
        overlap = set(ctx.slots())
        above = self._stacked_above_slots(overlap, later)
        if above:
            ctx.undo()
            lifted = self._take_off(above)
            ctx, failure = self._run_apply(patch)
            if ctx is not None:
                self._contexts[patch.name] = ctx
                self._applied_seq.append(patch.name)
            self._put_back(lifted)
            return failure
        self._contexts[patch.name] = ctx
        self._applied_seq.append(patch.name)
        return ""

    def _stacked_above_slots(self, slots: set, candidates: list[str]) -> list[str]:
        """Applied patches among ``candidates`` that touch ``slots``, with what they carry."""
        picked = [n for n in candidates if slots & set(self._contexts[n].slots())]
        return self._closure(picked) if picked else []

    def _closure(self, names: Iterable[str]) -> list[str]:
        """``names`` plus every applied patch stacked on them or requiring them, oldest first."""
        chosen = set(names)
        changed = True
        while changed:
            changed = False
            for name in self._applied_seq:
                if name in chosen:
                    continue
                patch = self._patches[name]
                needs = set(patch.requires) | set(patch.requires_any)
                if needs & chosen:
                    chosen.add(name)
                    changed = True
                    continue
                mine = set(self._contexts[name].slots())
                earlier = self._applied_seq[: self._applied_seq.index(name)]
                if any(o in chosen and mine & set(self._contexts[o].slots()) for o in earlier):
                    chosen.add(name)
                    changed = True
        return [n for n in self._applied_seq if n in chosen]

    def _take_off(self, names: list[str]) -> list[str]:
        """Undo ``names`` (an applied, closed set), newest first; returns them oldest first."""
        for name in reversed(names):
            self._contexts.pop(name).undo()
            self._applied_seq.remove(name)
        return names

    def _put_back(self, names: list[str]) -> None:
        for name in names:
            ctx, failure = self._run_apply(self._patches[name])
            if ctx is None:
                patch = self._patches[name]
                self._results[name] = PatchResult(
                    name, patch.engine, PatchStatus.FAILED, f"re-stacking failed: {failure}",
                    engine_version(patch.engine),
                )
                continue
            self._contexts[name] = ctx
            self._applied_seq.append(name)

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
                self._log_outcomes(changed)
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
            applied = [n for n in self._applied_seq if n in selected]
            off = self._take_off(self._closure(applied)) if applied else []
            extra = [n for n in off if n not in selected]
            if extra:
                logger.info(
                    "vlm_fastpath: also reverted %s (stacked on or requiring %s)",
                    ", ".join(extra),
                    ", ".join(n for n in off if n in selected),
                )
            for name in {*selected, *off}:
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
            patch = self._patches[name]
            self._faulted[name] = reason
            if patch.stays_when_faulted and name in self._applied_seq:
                reason = f"{reason}; left installed: {patch.stays_when_faulted}"
                self._faulted[name] = reason
                self._results[name] = PatchResult(
                    name, patch.engine, PatchStatus.FAULTED, reason, engine_version(patch.engine)
                )
                logger.warning("vlm_fastpath (pid %d): patch %s disabled: %s", os.getpid(),
                               name, reason)
                return [name]
            lifted = self._take_off(self._closure([name])) if name in self._applied_seq else []
            self._results[name] = PatchResult(
                name, patch.engine, PatchStatus.FAULTED, reason, engine_version(patch.engine)
            )
            gone = [name]
            for other in lifted:
                if other == name:
                    continue
                unmet = self._unmet_dependency(self._patches[other])
                if unmet is None:
                    self._put_back([other])
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
                if name in self._applied_seq:
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
        with self._lock:
            result = self._results.get(name)
            if result is not None and result.status is PatchStatus.APPLIED:
                result.reason = f"applied; {what} keeps the engine's processor: {reason}"

    def installed(self) -> list[str]:
        """Applied patches, in the order they are stacked (oldest first)."""
        with self._lock:
            return list(self._applied_seq)

    def status(self, engine: str | None = None) -> list[PatchResult]:
        """Current state of every patch, refreshing the reason of those still pending."""
        with self._lock:
            out = []
            for patch in self.patches(engine):
                result = self._results[patch.name]
                if result.status is PatchStatus.PENDING and not result.waiting:
                    preview = PatchResult(patch.name, patch.engine, PatchStatus.PENDING)
                    preview.engine_version = engine_version(patch.engine)
                    disabled = self._user_disabled(patch, None)
                    if disabled:
                        preview.status, preview.reason = PatchStatus.DISABLED, disabled
                    elif preview.engine_version is None:
                        preview.reason = f"{patch.engine} is not installed"
                    elif trigger_absent(patch.trigger):
                        preview.status = PatchStatus.NOT_NEEDED
                        preview.reason = (
                            f"{patch.engine} {preview.engine_version} has no module "
                            f"{patch.trigger}"
                        )
                    elif result.reason:
                        preview.reason = result.reason
                    elif patch.trigger in sys.modules:
                        preview.reason = "not decided yet: the next apply() decides"
                    else:
                        preview.reason = f"waiting for {patch.trigger} to be imported"
                    result = preview
                out.append(result)
            return out

    def _log_outcomes(self, changed: list[PatchResult]) -> None:
        """One INFO line per batch naming each outcome not yet logged in this process."""
        groups: dict[str, list[str]] = {}
        for result in changed:
            key = (result.name, result.status.value)
            if key in self._logged:
                continue
            self._logged.add(key)
            label = result.name
            if result.status is not PatchStatus.APPLIED and result.reason:
                label = f"{result.name} ({result.reason})"
            groups.setdefault(result.status.value, []).append(label)
        if not groups:
            return
        text = "; ".join(f"{status}: {', '.join(names)}" for status, names in groups.items())
        logger.info("vlm_fastpath (pid %d): %s", os.getpid(), text)


REGISTRY = PatchRegistry()


def _reset_lock_after_fork() -> None:
    # A lock held by another thread at fork time would deadlock the child forever.
    REGISTRY._lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_lock_after_fork)


def register(patch_cls: type[Patch]) -> type[Patch]:
    """Class decorator: instantiate and register a patch."""
    REGISTRY.register(patch_cls())
    return patch_cls
