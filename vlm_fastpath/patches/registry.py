"""The registry of named patches: apply, revert and report them, never breaking the engine.

Every public entry point is thread-safe (one re-entrant lock), idempotent, and catches
everything a patch raises: a patch that cannot apply is undone, logged once, and reported as
``failed`` while the engine keeps running with its own code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .._log import get_logger
from .base import Patch, PatchContext, PatchResult, PatchStatus
from .catalog import PATCH_MODULES
from .engine_versions import engine_version, release_of

logger = get_logger("vlm_fastpath.patches")

ENGINES = ("vllm", "sglang")


def _csv_env(name: str) -> set[str] | None:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return {item.strip() for item in value.split(",") if item.strip()}


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


def globally_disabled() -> bool:
    """``VLM_FASTPATH=0`` (or false/off/no) turns every patch off."""
    return os.environ.get("VLM_FASTPATH", "1").strip().lower() in ("0", "false", "off", "no")


class PatchRegistry:
    """All known patches and their state in this process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._patches: dict[str, Patch] = {}
        self._results: dict[str, PatchResult] = {}
        self._contexts: dict[str, PatchContext] = {}
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
        return patch

    def load_catalog(self) -> None:
        """Import our patch modules (cheap: they import no engine at module level)."""
        with self._lock:
            if self._loaded_catalog:
                return
            self._loaded_catalog = True
            for module_name in PATCH_MODULES:
                try:
                    importlib.import_module(module_name)
                except Exception as exc:  # noqa: BLE001 - a broken patch module must not spread
                    logger.warning("vlm_fastpath: cannot load %s: %s", module_name, exc)

    def patches(self, engine: str | None = None) -> list[Patch]:
        self.load_catalog()
        with self._lock:
            return [p for p in self._patches.values() if engine in (None, p.engine)]

    def get(self, name: str) -> Patch:
        self.load_catalog()
        with self._lock:
            return self._patches[name]

    # -- decisions ----------------------------------------------------------------------
    def _user_disabled(self, patch: Patch, allowed: set[str] | None) -> str | None:
        if globally_disabled():
            return "VLM_FASTPATH=0"
        only = _csv_env("VLM_FASTPATH_PATCHES")
        if only is not None and patch.name not in only:
            return "not listed in VLM_FASTPATH_PATCHES"
        skip = _csv_env("VLM_FASTPATH_SKIP")
        if skip is not None and patch.name in skip:
            return "listed in VLM_FASTPATH_SKIP"
        if allowed is not None and patch.name not in allowed:
            return "not selected by apply(patches=...)"
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
            not_needed = patch.not_needed()
            if not_needed:
                result.status, result.reason = PatchStatus.NOT_NEEDED, not_needed
                return result
        except Exception as exc:  # noqa: BLE001 - a detector bug must not break the engine
            result.status = PatchStatus.FAILED
            result.reason = f"detector raised {type(exc).__name__}: {exc}"
            return result
        ctx = PatchContext()
        try:
            patch.apply(ctx)
        except Exception as exc:  # noqa: BLE001
            ctx.undo()
            result.status = PatchStatus.FAILED
            result.reason = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "vlm_fastpath: patch %s not applied (%s); %s left untouched",
                patch.name,
                result.reason,
                patch.engine,
            )
            return result
        self._contexts[patch.name] = ctx
        result.status = PatchStatus.APPLIED
        result.reason = patch.summary
        return result

    # -- public operations ---------------------------------------------------------------
    def apply(
        self,
        engine: str | None = None,
        patches: Iterable[str] | None = None,
        *,
        trigger: str | None = None,
    ) -> list[PatchResult]:
        """Apply every eligible patch whose trigger module is imported; idempotent."""
        allowed = set(patches) if patches is not None else None
        changed: list[PatchResult] = []
        with self._lock:
            for patch in self.patches(engine):
                if trigger is not None and patch.trigger != trigger:
                    continue
                current = self._results[patch.name]
                if current.status is PatchStatus.APPLIED:
                    continue
                if current.status is not PatchStatus.PENDING and allowed is None:
                    continue  # already decided in this process
                result = self._evaluate(patch, allowed)
                if result.status is not current.status or result.reason != current.reason:
                    self._results[patch.name] = result
                    if result.status is not PatchStatus.PENDING:
                        changed.append(result)
            if changed:
                self._log_summary(changed)
            return [self._results[p.name] for p in self.patches(engine)]

    def revert(self, engine: str | None = None, patches: Iterable[str] | None = None) -> None:
        """Undo applied patches (restoring the exact original objects) and forget decisions."""
        wanted = set(patches) if patches is not None else None
        with self._lock:
            for patch in reversed(self.patches(engine)):
                if wanted is not None and patch.name not in wanted:
                    continue
                ctx = self._contexts.pop(patch.name, None)
                if ctx is not None:
                    ctx.undo()
                self._results[patch.name] = PatchResult(
                    patch.name, patch.engine, PatchStatus.PENDING
                )

    def status(self, engine: str | None = None) -> list[PatchResult]:
        """Current state of every patch, refreshing the reason of those still pending."""
        with self._lock:
            out = []
            for patch in self.patches(engine):
                result = self._results[patch.name]
                if result.status is PatchStatus.PENDING:
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
                    else:
                        preview.reason = f"waiting for {patch.trigger} to be imported"
                    result = preview
                out.append(result)
            return out

    def _log_summary(self, changed: list[PatchResult]) -> None:
        groups: dict[str, list[str]] = {}
        for result in changed:
            groups.setdefault(result.status.value, []).append(result.name)
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
