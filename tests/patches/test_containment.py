"""Run-time fault containment against a fake engine: fallback, re-raise rules, quarantine."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from vlm_fastpath.patches.core import containment
from vlm_fastpath.patches.core import registry as registry_module
from vlm_fastpath.patches.core.base import Patch, PatchContext, PatchStatus
from vlm_fastpath.patches.core.containment import answer, call_contained, contained
from vlm_fastpath.patches.core.registry import PatchRegistry

ENGINE = "faultengine"
TRIGGER = "faultengine.models.thing"
CALLS: dict[str, int] = {}


def _engine_feature(x: int) -> int:
    CALLS["original"] = CALLS.get("original", 0) + 1
    if x < 0:
        raise RuntimeError("the engine's own failure")
    return x * 2


class FeaturePatch(Patch):
    """Wraps ``feature`` with a fast path that has a bug for x == 13, delegates x < 0."""

    name = "fault-feature"
    engine = ENGINE
    versions = ">=1.0"
    trigger = TRIGGER
    summary = "fast feature"

    def apply(self, ctx: PatchContext) -> None:
        target = sys.modules[TRIGGER]
        original = target.feature

        @contained(self.name, original)
        def feature(x: int) -> int:
            if x == -13:
                raise IndexError("bug on input the engine refuses too")
            if x < 0:
                return original(x)  # the engine's function raises: not our fault
            if x == 13:
                raise IndexError("bug in the fast path")
            if x == 7:
                raise ValueError("bad input: seven")
            return x + x

        ctx.set_attr(target, "feature", feature)


class StackedPatch(Patch):
    """Wraps the same attribute after FeaturePatch; does not require it."""

    name = "fault-stacked"
    engine = ENGINE
    versions = ">=1.0"
    trigger = TRIGGER
    after = ("fault-feature",)

    def apply(self, ctx: PatchContext) -> None:
        target = sys.modules[TRIGGER]
        inner = target.feature
        ctx.set_attr(target, "feature", lambda x: inner(x))


class NeedsFeaturePatch(Patch):
    name = "fault-needs-feature"
    engine = ENGINE
    versions = ">=1.0"
    trigger = TRIGGER
    requires = ("fault-feature",)

    def apply(self, ctx: PatchContext) -> None:
        ctx.set_attr(sys.modules[TRIGGER], "extra", True)


@pytest.fixture
def reg(monkeypatch: pytest.MonkeyPatch) -> PatchRegistry:
    for name in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP",
                 "VLM_FASTPATH_FAULT_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    top = types.ModuleType(ENGINE)
    top.__version__ = "1.2.0"
    target = types.ModuleType(TRIGGER)
    target.feature = _engine_feature
    monkeypatch.setitem(sys.modules, ENGINE, top)
    monkeypatch.setitem(sys.modules, TRIGGER, target)
    registry = PatchRegistry()
    registry._loaded_catalog = True
    for patch in (FeaturePatch(), StackedPatch(), NeedsFeaturePatch()):
        registry.register(patch)
    monkeypatch.setattr(registry_module, "REGISTRY", registry)
    containment.reset()
    CALLS.clear()
    yield registry
    containment.reset()


def _state(registry: PatchRegistry, name: str) -> PatchStatus:
    return next(r for r in registry.status() if r.name == name).status


def test_fault_falls_back_to_the_engine_result(reg, caplog) -> None:
    reg.apply()
    target = sys.modules[TRIGGER]
    assert target.feature(3) == 6 and "original" not in CALLS
    with caplog.at_level(logging.WARNING, logger="vlm_fastpath"):
        assert target.feature(13) == _engine_feature(13)
        assert target.feature(13) == 26
    warnings = [r for r in caplog.records if "fault-feature failed" in r.getMessage()]
    assert len(warnings) == 1  # logged once per patch
    assert "IndexError: bug in the fast path" in warnings[0].getMessage()
    assert "Traceback" in warnings[0].getMessage()
    assert _state(reg, "fault-feature") is PatchStatus.APPLIED  # 2 < the limit of 3


def test_limit_quarantines_through_the_registry(reg) -> None:
    reg.apply()
    target = sys.modules[TRIGGER]
    for _ in range(3):
        assert target.feature(13) == 26
    assert _state(reg, "fault-feature") is PatchStatus.FAULTED
    reason = next(r for r in reg.status() if r.name == "fault-feature").reason
    assert "3 run-time fault" in reason and "IndexError" in reason
    # The requiring patch is gone, the stacked one is back on the engine's own function.
    assert _state(reg, "fault-needs-feature") is PatchStatus.NOT_NEEDED
    assert not hasattr(target, "extra")
    assert _state(reg, "fault-stacked") is PatchStatus.APPLIED
    assert target.feature(13) == 26 and target.feature(2) == 4
    assert reg.installed() == ["fault-stacked"]
    reg.apply()  # never re-applied in this process
    assert _state(reg, "fault-feature") is PatchStatus.FAULTED
    reg.revert()
    assert _state(reg, "fault-feature") is PatchStatus.FAULTED


def test_old_references_go_to_the_engine_after_the_limit(reg, monkeypatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "1")
    reg.apply(patches=["fault-feature"])
    held = sys.modules[TRIGGER].feature  # a copy the engine bound before the quarantine
    assert held(13) == 26
    assert _state(reg, "fault-feature") is PatchStatus.FAULTED
    CALLS.clear()
    assert held(5) == 10 and CALLS["original"] == 1  # routed to the original


def test_user_errors_and_engine_errors_propagate_uncounted(reg) -> None:
    reg.apply()
    target = sys.modules[TRIGGER]
    with pytest.raises(ValueError, match="seven"):
        target.feature(7)
    CALLS.clear()
    with pytest.raises(RuntimeError, match="engine's own"):
        target.feature(-1)
    assert CALLS["original"] == 1  # the original is not run a second time
    assert containment.LEDGER.counts == {}


def test_bad_input_the_engine_refuses_too_is_never_a_fault(reg) -> None:
    """A client cannot disable a patch by sending input the engine's own code rejects."""
    reg.apply()
    target = sys.modules[TRIGGER]
    for _ in range(5):  # past the limit of 3
        with pytest.raises(RuntimeError, match="engine's own") as info:
            target.feature(-13)
        assert info.value.__context__ is None  # the engine's error, not chained onto ours
    assert containment.LEDGER.counts == {}
    assert _state(reg, "fault-feature") is PatchStatus.APPLIED
    assert target.feature(13) == 26 and containment.LEDGER.counts == {"fault-feature": 1}


def test_no_fallback_propagates_but_counts() -> None:
    containment.reset()

    def fast() -> int:
        raise KeyError("state already changed")

    with pytest.raises(KeyError):
        call_contained("fault-nofallback", fast, lambda: 1, fallback=False)
    assert containment.LEDGER.counts["fault-nofallback"] == 1
    containment.reset()


def test_inner_guard_marks_engine_errors_for_outer_guards() -> None:
    containment.reset()

    def engine() -> int:
        raise RuntimeError("engine")

    inner = contained("fault-inner", engine)(lambda: engine())
    outer_calls = []

    def outer_original() -> int:
        outer_calls.append(1)
        return 0

    with pytest.raises(RuntimeError, match="engine"):
        call_contained("fault-outer", inner, outer_original)
    assert outer_calls == [] and containment.LEDGER.counts == {}


def test_answer_is_a_fixed_engine_decision() -> None:
    containment.reset()

    def should_defer(item: int) -> bool:
        raise AttributeError("fast-path decision bug")

    guarded = contained("fault-decision", answer(False))(should_defer)
    assert guarded(3) is False
    assert containment.LEDGER.counts == {"fault-decision": 1}
    containment.reset()


def test_outer_guard_does_not_fall_back_past_a_no_fallback_guard() -> None:
    containment.reset()

    def changes_state() -> int:
        raise RuntimeError("slot already acknowledged")

    inner = contained("fault-ipc-inner", lambda: 0, fallback=False)(changes_state)
    outer_calls = []

    def outer_original() -> int:
        outer_calls.append(1)
        return 0

    with pytest.raises(RuntimeError, match="acknowledged"):
        call_contained("fault-ipc-outer", inner, outer_original)
    assert outer_calls == []
    assert containment.LEDGER.counts == {"fault-ipc-inner": 1, "fault-ipc-outer": 1}
    containment.reset()


def test_doctor_reports_a_quarantined_patch() -> None:
    from vlm_fastpath import doctor
    from vlm_fastpath.patches.core.registry import REGISTRY

    name = "vllm-image-loader-client-errors"
    try:
        REGISTRY.quarantine(name, "disabled after 3 run-time fault(s) in its fast path (test)")
        entry = next(p for p in doctor.collect(import_engines=False)["patches"]
                     if p["name"] == name)
        assert entry["status"] == "faulted" and "run-time fault" in entry["reason"]
        REGISTRY.apply()
        assert next(r for r in REGISTRY.status() if r.name == name).status is PatchStatus.FAULTED
    finally:
        REGISTRY.clear_faults()
    assert next(r for r in REGISTRY.status() if r.name == name).status is not PatchStatus.FAULTED
