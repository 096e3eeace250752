"""What the registry reports: a patch's status before ``apply()`` decides it, and the log.

:func:`preview` answers ``status()`` for a patch still pending with the same first steps
``apply()`` decides by (:func:`.decisions.precheck`), so the two never disagree;
:func:`log_outcomes` writes one INFO line per batch of new outcomes.
"""

from __future__ import annotations

import logging
import os

from .base import Patch, PatchResult, PatchStatus
from .decisions import below_range, precheck
from .engine_versions import engine_version


def preview(patch: Patch, result: PatchResult) -> PatchResult:
    """The status of a pending, undecided ``patch`` (``result``: its stored one) as of now."""
    early = precheck(patch, None)
    if early is not None and (
        early.status is not PatchStatus.PENDING or early.engine_version is None
    ):
        return early  # disabled, trigger absent from this release, or engine not installed
    below = below_range(patch) if early is not None else None
    if below:
        # Its module is not imported (or does not import here); the release alone decides.
        early.status, early.reason = PatchStatus.UNSUPPORTED_VERSION, below
        return early
    shown = early or PatchResult(
        patch.name, patch.engine, PatchStatus.PENDING,
        "not decided yet: the next apply() decides", engine_version(patch.engine),
    )
    if result.reason:
        shown.reason = result.reason  # e.g. "reverted with ..."
    return shown


def with_models(result: PatchResult, notes: dict[str, str]) -> PatchResult:
    """An applied patch's status with what it does for each model it met at hand-out: the
    models it serves, and those that keep the engine's processor with the reason. A patch
    that met models and serves none of them is ``stood-aside`` (never "applied" for a model
    it does not serve)."""
    served = [what for what, reason in notes.items() if not reason]
    kept = [f"{what} keeps the engine's processor: {reason}"
            for what, reason in notes.items() if reason]
    parts = [result.reason] if result.reason else []
    if served:
        parts.append("serves " + ", ".join(served))
    parts.extend(kept)
    status = PatchStatus.APPLIED if served or not kept else PatchStatus.STOOD_ASIDE
    return PatchResult(result.name, result.engine, status, "; ".join(parts),
                       result.engine_version, result.waiting)


def log_outcomes(logger: logging.Logger, logged: set[tuple[str, str]],
                 changed: list[PatchResult]) -> None:
    """One INFO line per batch naming each outcome not yet logged in this process."""
    groups: dict[str, list[str]] = {}
    for result in changed:
        key = (result.name, result.status.value)
        if key in logged:
            continue
        logged.add(key)
        label = result.name
        if result.status is not PatchStatus.APPLIED and result.reason:
            label = f"{result.name} ({result.reason})"
        groups.setdefault(result.status.value, []).append(label)
    if not groups:
        return
    text = "; ".join(f"{status}: {', '.join(names)}" for status, names in groups.items())
    logger.info("vlm_fastpath (pid %d): %s", os.getpid(), text)
