"""One check for every patch that hands out objects an engine may keep (issue #31).

Quarantine must mean the engine's own behaviour from then on for every object the patch ever
handed out, including one the engine built and cached before the fault. The check: build the
object while the patch is applied, make our fast path raise, and make ``limit + 2`` calls
through it. Every answer must equal the reference (the same call with the patch off, as with
``VLM_FASTPATH=0``); the patch is ``faulted`` from call ``limit`` on; the last call runs with
a fast path that no longer raises, and it must not be consulted at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from vlm_fastpath.patches.core import containment
from vlm_fastpath.patches.core import registry as registry_module


class FastPathConsulted(AssertionError):
    """A held object ran our fast path after its patch was quarantined."""


@dataclass
class HeldCase:
    """A patch that hands out objects, and how to drive one of them."""

    patch: str  # the patch whose fast-path faults are counted
    reference: Callable[[], Any]  # the call's answer with the patch off (run first)
    build: Callable[[], Any]  # the object as the engine gets it, the patch applied
    inject: Callable[[pytest.MonkeyPatch, Any, Callable[..., Any]], None]  # our fast path -> f
    call: Callable[[Any], Any]  # one call through the held object
    equal: Callable[[Any, Any], bool]
    also_gone: tuple[str, ...] = ()  # patches the quarantine takes off with it


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("injected fault in the fast path")


def _status(name: str) -> str:
    # Looked up per call: a test may stand in its own registry (fake engines).
    return next(r.status.value for r in registry_module.REGISTRY.status() if r.name == name)


def check_held_object(
    case: HeldCase, monkeypatch: pytest.MonkeyPatch, limit: int = 3
) -> list[tuple[int, str, bool]]:
    """Run the check; returns ``(call, status after it, equal to the reference)`` rows."""
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", str(limit))
    containment.reset()
    theirs = case.reference()
    held = case.build()
    assert _status(case.patch) == "applied", f"{case.patch} must be applied to hand out objects"
    case.inject(monkeypatch, held, _boom)
    consulted: list[int] = []
    rows = []
    for n in range(1, limit + 3):
        if n == limit + 2:  # a fast path that would answer: it must not run any more

            def spy(*_args: Any, _n: int = n, **_kwargs: Any) -> Any:
                consulted.append(_n)
                raise FastPathConsulted(f"call {_n} ran the fast path after quarantine")

            case.inject(monkeypatch, held, spy)
        out = case.call(held)
        state = _status(case.patch)
        same = case.equal(out, theirs)
        rows.append((n, state, same))
        assert same, f"call {n} differs from the patch-off answer"
        assert state == ("faulted" if n >= limit else "applied"), f"call {n}: {state}"
    assert consulted == []
    assert containment.LEDGER.counts.get(case.patch) == limit
    for name in case.also_gone:
        assert _status(name) != "applied", f"{name} stayed applied without {case.patch}"
    return rows


def forget_faults() -> None:
    """Undo a check's quarantine (tests only): faults forgotten, the patch pending again."""
    containment.reset()
    registry_module.REGISTRY.clear_faults()
