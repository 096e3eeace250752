"""Stacked patches: three wrappers on one method, partial reverts, dependencies as data.

Each fake patch wraps ``Model.f`` through ``ctx.set_attr``; ``Model().f()`` returns the names of
the wrappers it ran through, innermost first, so the installed composition is observable.
"""

from __future__ import annotations

import sys
import types

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from vlm_fastpath.patches.core.base import Patch, PatchContext, PatchStatus
from vlm_fastpath.patches.core.decisions import topological_order
from vlm_fastpath.patches.core.registry import PatchRegistry

ENGINE = "stackengine"
TRIGGER = "stackengine.model"
OTHER_TRIGGER = "stackengine.other"


def _original_f(self) -> list[str]:
    return []


def _original_g(self) -> list[str]:
    return []


class Model:
    f = _original_f
    g = _original_g


def _install_fake_engine() -> None:
    top = types.ModuleType(ENGINE)
    top.__version__ = "1.0.0"
    target = types.ModuleType(TRIGGER)
    target.Model = Model
    sys.modules[ENGINE] = top
    sys.modules[TRIGGER] = target


def _remove_fake_engine() -> None:
    for name in (ENGINE, TRIGGER, OTHER_TRIGGER):
        sys.modules.pop(name, None)
    Model.f = _original_f
    Model.g = _original_g


def wrapping_patch(name: str, attrs: tuple[str, ...] = ("f",), **meta) -> type[Patch]:
    """A patch class that wraps each of ``Model.<attrs>`` to append ``name``."""

    def apply(self, ctx: PatchContext) -> None:
        for attr in attrs:
            inner = Model.__dict__[attr]

            def wrapper(model, _inner=inner):
                return [*_inner(model), name]

            ctx.set_attr(Model, attr, wrapper)

    namespace = {
        "name": name,
        "engine": ENGINE,
        "versions": ">=1.0",
        "trigger": meta.pop("trigger", TRIGGER),
        "modules": (TRIGGER,),
        "apply": apply,
        **meta,
    }
    return type(f"Patch_{name}", (Patch,), namespace)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch):
    for var in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        monkeypatch.delenv(var, raising=False)
    _install_fake_engine()
    yield
    _remove_fake_engine()


def _registry(*classes: type[Patch]) -> PatchRegistry:
    reg = PatchRegistry()
    reg._loaded_catalog = True
    for cls in classes:
        reg.register(cls())
    return reg


def _statuses(reg: PatchRegistry) -> dict[str, str]:
    return {r.name: r.status.value for r in reg.status()}


def test_partial_revert_of_a_stacked_patch(engine) -> None:
    """C(B(A(orig))): reverting b also takes c off; status says so; a stays."""
    reg = _registry(wrapping_patch("a"), wrapping_patch("b"), wrapping_patch("c"))
    reg.apply()
    assert Model().f() == ["a", "b", "c"]
    reverted = reg.revert(patches=["b"])
    assert reverted == ["b", "c"]
    statuses = _statuses(reg)
    assert statuses == {"a": "applied", "b": "pending", "c": "pending"}
    assert Model().f() == ["a"]
    assert "reverted with b" in {r.name: r.reason for r in reg.status()}["c"]
    reg.revert()
    assert Model.__dict__["f"] is _original_f


def test_reverting_the_bottom_patch_takes_the_stack_off(engine) -> None:
    reg = _registry(wrapping_patch("a"), wrapping_patch("b"), wrapping_patch("c"))
    reg.apply()
    assert reg.revert(patches=["a"]) == ["a", "b", "c"]
    assert Model.__dict__["f"] is _original_f
    assert set(_statuses(reg).values()) == {"pending"}


def test_patches_on_other_attributes_stay(engine) -> None:
    reg = _registry(wrapping_patch("a"), wrapping_patch("b"), wrapping_patch("g1", ("g",)))
    reg.apply()
    assert reg.revert(patches=["a"]) == ["a", "b"]
    assert Model().g() == ["g1"]
    assert _statuses(reg)["g1"] == "applied"


def test_dependents_are_reverted_with_their_requirement(engine) -> None:
    reg = _registry(wrapping_patch("base", ("g",)), wrapping_patch("user", requires=("base",)))
    reg.apply()
    assert reg.installed() == ["base", "user"]
    assert reg.revert(patches=["base"]) == ["base", "user"]
    assert Model.__dict__["f"] is _original_f and Model.__dict__["g"] is _original_g


def test_unmet_requirement_is_not_needed_with_its_reason(engine) -> None:
    reg = _registry(wrapping_patch("base", ("g",)), wrapping_patch("user", requires=("base",)))
    reg.apply(patches=["user"])
    result = {r.name: r for r in reg.status()}["user"]
    assert result.status is PatchStatus.NOT_NEEDED
    assert result.reason == "requires base: disabled"
    assert Model.__dict__["f"] is _original_f
    # once the requirement is applied, the dependent is decided again
    reg.revert()
    reg.apply()
    assert _statuses(reg) == {"base": "applied", "user": "applied"}


def test_requirement_missing_from_the_registry(engine) -> None:
    reg = _registry(wrapping_patch("user", requires=("nowhere",)))
    reg.apply()
    result = reg.status()[0]
    assert (result.status, result.reason) == (PatchStatus.NOT_NEEDED, "requires nowhere: not "
                                              "registered")


def test_requires_any(engine) -> None:
    reg = _registry(
        wrapping_patch("p1", ("g",)),
        wrapping_patch("p2", ("g",)),
        wrapping_patch("user", requires_any=("p1", "p2")),
    )
    reg.apply(patches=["user", "p2"])
    assert _statuses(reg) == {"p1": "disabled", "p2": "applied", "user": "applied"}
    reg.revert()
    reg.apply(patches=["user"])
    reason = {r.name: r.reason for r in reg.status()}["user"]
    assert reason == "needs one of p1, p2 applied (p1: disabled; p2: disabled)"


def test_requirement_waits_for_its_trigger(engine) -> None:
    """A dependency whose module is not imported yet keeps the dependent pending."""
    reg = _registry(
        wrapping_patch("late", ("g",), trigger=OTHER_TRIGGER),
        wrapping_patch("user", requires=("late",)),
    )
    reg.apply(trigger=TRIGGER)
    assert _statuses(reg)["user"] == "pending"
    assert "waiting for late" in {r.name: r.reason for r in reg.status()}["user"]
    sys.modules[OTHER_TRIGGER] = types.ModuleType(OTHER_TRIGGER)
    reg.apply(trigger=OTHER_TRIGGER)
    assert _statuses(reg) == {"late": "applied", "user": "applied"}


def test_order_follows_after_whatever_order_the_triggers_import(engine) -> None:
    """``outer`` declares after=inner; inner's module imports last: the stack is restacked."""
    reg = _registry(
        wrapping_patch("outer", after=("inner",)),
        wrapping_patch("inner", trigger=OTHER_TRIGGER),
    )
    assert [p.name for p in reg.patches()] == ["inner", "outer"]
    reg.apply(trigger=TRIGGER)
    assert Model().f() == ["outer"]
    sys.modules[OTHER_TRIGGER] = types.ModuleType(OTHER_TRIGGER)
    reg.apply(trigger=OTHER_TRIGGER)
    assert Model().f() == ["inner", "outer"]
    assert reg.installed() == ["inner", "outer"]
    reg.revert(patches=["outer"])
    assert Model().f() == ["inner"]
    reg.revert()
    assert Model.__dict__["f"] is _original_f


def test_dependency_cycle_fails_with_a_reason(engine) -> None:
    reg = _registry(wrapping_patch("x", after=("y",)), wrapping_patch("y", after=("x",)))
    reg.apply()
    for result in reg.status():
        assert result.status is PatchStatus.FAILED
        assert "dependency cycle" in result.reason
    assert Model.__dict__["f"] is _original_f


def test_topological_order_keeps_catalog_order_for_ties() -> None:
    classes = [wrapping_patch(n) for n in ("p", "q", "r")]
    classes.append(wrapping_patch("s", after=("p",)))
    order, cyclic = topological_order([c() for c in classes])
    assert [p.name for p in order] == ["p", "q", "r", "s"] and not cyclic


# -- random apply/revert sequences --------------------------------------------------------

NAMES = ("a", "b", "c", "d", "e")
# a, b, c wrap f; d wraps f and g; e wraps g and requires b.
SPECS = {
    "a": {"attrs": ("f",)},
    "b": {"attrs": ("f",)},
    "c": {"attrs": ("f",), "after": ("b",)},
    "d": {"attrs": ("f", "g")},
    "e": {"attrs": ("g",), "requires": ("b",)},
}


class StackMachine(RuleBasedStateMachine):
    """Any sequence of apply/revert leaves each attribute original or as status() implies."""

    def __init__(self) -> None:
        super().__init__()
        _remove_fake_engine()
        _install_fake_engine()
        classes = []
        for name in NAMES:
            spec = dict(SPECS[name])
            attrs = spec.pop("attrs")
            classes.append(wrapping_patch(name, attrs, **spec))
        self.reg = _registry(*classes)
        self.order = [p.name for p in self.reg.patches()]

    @rule(subset=st.none() | st.sets(st.sampled_from(NAMES)))
    def apply(self, subset) -> None:
        self.reg.apply(patches=subset)

    @rule(subset=st.none() | st.sets(st.sampled_from(NAMES), min_size=1))
    def revert(self, subset) -> None:
        self.reg.revert(patches=subset)

    @invariant()
    def installed_matches_status(self) -> None:
        applied = {r.name for r in self.reg.status() if r.status is PatchStatus.APPLIED}
        for attr in ("f", "g"):
            expected = [n for n in self.order if n in applied and attr in SPECS[n]["attrs"]]
            if not expected:
                original = _original_f if attr == "f" else _original_g
                assert Model.__dict__[attr] is original, attr
            else:
                assert getattr(Model(), attr)() == expected, (attr, applied)
        if "e" in applied:
            assert "b" in applied

    def teardown(self) -> None:
        self.reg.revert()
        _remove_fake_engine()


@pytest.mark.usefixtures("engine")
def test_random_apply_revert_sequences() -> None:
    machine = StackMachine.TestCase
    machine.settings = settings(max_examples=150, stateful_step_count=12, deadline=None)
    machine("runTest").runTest()


def test_each_outcome_is_logged_once_per_process(engine, caplog) -> None:
    """apply, revert, apply again: every patch's outcome appears in one INFO line, once."""
    import logging

    reg = _registry(
        wrapping_patch("a"),
        wrapping_patch("b", requires=("nowhere",)),
        wrapping_patch("c", versions=">=9"),
    )
    with caplog.at_level(logging.INFO, logger="vlm_fastpath"):
        reg.apply()
        reg.revert()
        reg.apply()
        reg.apply()
    lines = [r.getMessage() for r in caplog.records if "vlm_fastpath (pid" in r.getMessage()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "applied: a" in line
    assert "not-needed: b (requires nowhere: not registered)" in line
    assert "unsupported-version: c (stackengine 1.0.0 is outside >=9)" in line
