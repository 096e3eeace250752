"""How the registry decides one patch: every rule, in the order it applies, in one place.

``apply()`` and ``status()`` both decide through :func:`precheck` (is it switched off, is the
engine there, is its trigger imported) and ``apply()`` goes on with :func:`decide` (upstream,
version range, dependencies, not needed, contract), so what ``status()`` reports for a patch
not yet decided is what ``apply()`` would say at that step. Pure functions of the patch, the
results so far and the process (settings, ``sys.modules``); the registry holds the state.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ... import settings
from .base import Patch, PatchResult, PatchStatus
from .engine_versions import engine_version, release_of
from .fingerprint import code_fingerprint, verified_releases


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


def below_range(patch: Patch) -> str | None:
    """``"<engine> <version> is outside <range>"`` where the installed release is older than the
    patch's lower bound (it can never apply there: its modules need not even import), else
    None (engine absent, in range, or above a cap, where the upstream detector speaks first)."""
    version = engine_version(patch.engine)
    release = release_of(version) if version else None
    if release is None:
        return None
    try:
        lower = [s for s in SpecifierSet(patch.versions) if s.operator in (">=", ">")]
    except InvalidSpecifier:
        return None
    if any(not s.contains(release, prereleases=True) for s in lower):
        return f"{patch.engine} {version} is outside {patch.versions}"
    return None


def release_key(release: str) -> tuple[int, object]:
    parsed = release_of(release)
    return (0, release) if parsed is None else (1, parsed)


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


def globally_disabled() -> bool:
    """``VLM_FASTPATH=0`` (or false/off/no) turns every patch off."""
    return not settings.enabled()


def user_disabled(patch: Patch, allowed: set[str] | None) -> str | None:
    """Why the user's settings (or ``apply(patches=...)``) keep ``patch`` off, if they do."""
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


def precheck(patch: Patch, allowed: set[str] | None) -> PatchResult | None:
    """The steps before the patch's own code is asked: switched off (``disabled``), engine not
    installed or trigger not imported yet (``pending``, with the reason), trigger absent from
    this release (``not-needed``). None when the trigger is imported: :func:`decide` goes on."""
    version = engine_version(patch.engine)
    result = PatchResult(patch.name, patch.engine, PatchStatus.PENDING, "", version)
    disabled = user_disabled(patch, allowed)
    if disabled:
        result.status, result.reason = PatchStatus.DISABLED, disabled
    elif version is None:
        result.reason = f"{patch.engine} is not installed"
    elif patch.trigger in sys.modules:
        return None
    elif trigger_absent(patch.trigger):
        result.status = PatchStatus.NOT_NEEDED
        result.reason = f"{patch.engine} {version} has no module {patch.trigger}"
    else:
        result.reason = f"waiting for {patch.trigger} to be imported"
    return result


def _describe(results: Mapping[str, PatchResult], name: str) -> str:
    state = results.get(name)
    return f"{name}: not registered" if state is None else f"{name}: {state.status.value}"


def unmet_dependency(
    patch: Patch, results: Mapping[str, PatchResult], cyclic: set[str]
) -> tuple[PatchStatus, str] | None:
    """Why ``patch`` must wait (pending) or stand aside (not-needed) for a dependency."""
    if patch.name in cyclic:
        return PatchStatus.FAILED, "dependency cycle through " + ", ".join(sorted(cyclic))
    for dep in patch.requires:
        state = results.get(dep)
        if state is None or state.status is not PatchStatus.APPLIED:
            if state is not None and state.status is PatchStatus.PENDING:
                return PatchStatus.PENDING, f"waiting for {dep}, which it requires"
            return PatchStatus.NOT_NEEDED, f"requires {_describe(results, dep)}"
    if patch.requires_any:
        states = [results.get(dep) for dep in patch.requires_any]
        if not any(s is not None and s.status is PatchStatus.APPLIED for s in states):
            names = ", ".join(patch.requires_any)
            if any(s is not None and s.status is PatchStatus.PENDING for s in states):
                return PatchStatus.PENDING, f"waiting for one of {names}"
            seen = "; ".join(_describe(results, dep) for dep in patch.requires_any)
            return PatchStatus.NOT_NEEDED, f"needs one of {names} applied ({seen})"
    return None


@dataclass
class Decision:
    """A decided ``result``; ``install`` True when the patch is to be applied now, with
    ``unverified`` the note its status carries (empty on a release the sweep verified)."""

    result: PatchResult
    install: bool = False
    unverified: str = ""


def decide(patch: Patch, allowed: set[str] | None, results: Mapping[str, PatchResult],
           cyclic: set[str]) -> Decision:
    """Every rule before installing, in order; a detector that raises makes it ``failed``."""
    early = precheck(patch, allowed)
    if early is not None:
        return Decision(early)
    version = engine_version(patch.engine)
    assert version is not None  # precheck returns None only with the engine installed
    result = PatchResult(patch.name, patch.engine, PatchStatus.PENDING, "", version)
    try:
        upstream = patch.upstream_equivalent()
        if upstream:
            result.status, result.reason = PatchStatus.UPSTREAM, upstream
            return Decision(result)
        release = release_of(version)
        try:
            in_range = release is not None and release in SpecifierSet(patch.versions)
        except InvalidSpecifier:
            in_range = False
        if not in_range:
            result.status = PatchStatus.UNSUPPORTED_VERSION
            result.reason = f"{patch.engine} {version} is outside {patch.versions}"
            return Decision(result)
        unmet = unmet_dependency(patch, results, cyclic)
        if unmet is not None:
            result.status, result.reason = unmet
            result.waiting = True
            return Decision(result)
        not_needed = patch.not_needed()
        if not_needed:
            result.status, result.reason = PatchStatus.NOT_NEEDED, not_needed
            return Decision(result)
        unverified = unverified_note(patch, version)
        clause = patch.contract()
        if clause:
            result.status = PatchStatus.STOOD_ASIDE
            result.reason = f"contract not met: {clause}" + (
                f" ({unverified})" if unverified else ""
            )
            return Decision(result)
    except Exception as exc:  # noqa: BLE001 - a detector bug must not break the engine
        result.status = PatchStatus.FAILED
        result.reason = f"detector raised {type(exc).__name__}: {exc}"
        return Decision(result)
    return Decision(result, install=True, unverified=unverified)


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
