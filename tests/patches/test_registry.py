"""The registry against a fake engine: every status, revert exactness, controls, threads, fork."""

from __future__ import annotations

import logging
import os
import sys
import threading
import types

import pytest

from vlm_fastpath.patches.core.base import Patch, PatchContext, PatchStatus
from vlm_fastpath.patches.core.registry import PatchRegistry

ENGINE = "fakeengine"
TRIGGER = "fakeengine.models.thing"


def _original_feature(x: int) -> int:
    return x + 1


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A fake engine: a package with a version, a target module, and a from-import copy."""
    for name in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        monkeypatch.delenv(name, raising=False)
    top = types.ModuleType(ENGINE)
    top.__version__ = "1.4.0"
    target = types.ModuleType(TRIGGER)
    target.feature = _original_feature

    class Engine:
        def run(self) -> str:
            return "original"

    target.Engine = Engine
    copy = types.ModuleType(f"{ENGINE}.consumer")
    copy.feature = target.feature  # what `from fakeengine.models.thing import feature` does
    monkeypatch.setitem(sys.modules, ENGINE, top)
    monkeypatch.setitem(sys.modules, TRIGGER, target)
    monkeypatch.setitem(sys.modules, f"{ENGINE}.consumer", copy)
    return types.SimpleNamespace(top=top, target=target, copy=copy, Engine=Engine)


def _fast_feature(x: int) -> int:
    return x + 1  # same result, different object


class FeaturePatch(Patch):
    name = "fake-feature"
    engine = ENGINE
    versions = ">=1.0,<2.0"
    trigger = TRIGGER
    summary = "faster feature"
    upstream_flag = False
    applies = 0

    def upstream_equivalent(self) -> str | None:
        target = sys.modules[TRIGGER]
        return "fakeengine has fast_feature" if hasattr(target, "fast_feature") else None

    def apply(self, ctx: PatchContext) -> None:
        type(self).applies += 1
        target = sys.modules[TRIGGER]
        ctx.rebind_globals(target.feature, _fast_feature, [ENGINE])

        def run(self_engine: object) -> str:
            return "patched"

        ctx.set_attr(target.Engine, "run", run)


@pytest.fixture
def registry(fake_engine: types.SimpleNamespace) -> PatchRegistry:
    FeaturePatch.applies = 0
    reg = PatchRegistry()
    reg._loaded_catalog = True  # only our fake patches
    reg.register(FeaturePatch())
    return reg


def _status(reg: PatchRegistry, name: str = "fake-feature"):
    return next(r for r in reg.status() if r.name == name)


def test_apply_then_revert_restores_exact_objects(registry, fake_engine) -> None:
    original_run = fake_engine.Engine.__dict__["run"]
    registry.apply()
    assert _status(registry).status is PatchStatus.APPLIED
    assert fake_engine.target.feature is _fast_feature
    assert fake_engine.copy.feature is _fast_feature  # the from-import copy too
    assert fake_engine.Engine().run() == "patched"
    registry.revert()
    assert fake_engine.target.feature is _original_feature
    assert fake_engine.copy.feature is _original_feature
    assert fake_engine.Engine.__dict__["run"] is original_run
    assert _status(registry).status is PatchStatus.PENDING


def test_apply_is_idempotent(registry) -> None:
    registry.apply()
    registry.apply()
    registry.apply(engine=ENGINE)
    assert FeaturePatch.applies == 1


def test_upstream_equivalent_stands_aside(registry, fake_engine) -> None:
    fake_engine.target.fast_feature = _fast_feature
    registry.apply()
    result = _status(registry)
    assert result.status is PatchStatus.UPSTREAM
    assert "fast_feature" in result.reason
    assert fake_engine.target.feature is _original_feature
    assert FeaturePatch.applies == 0


def test_version_outside_range(registry, fake_engine) -> None:
    fake_engine.top.__version__ = "2.1.0"
    registry.apply()
    result = _status(registry)
    assert result.status is PatchStatus.UNSUPPORTED_VERSION
    assert "2.1.0" in result.reason and ">=1.0,<2.0" in result.reason
    assert fake_engine.target.feature is _original_feature


def test_local_version_tag_is_ignored_for_ranges(registry, fake_engine) -> None:
    fake_engine.top.__version__ = "1.4.0+cpu"
    registry.apply()
    assert _status(registry).status is PatchStatus.APPLIED


def test_pending_until_trigger_imported(registry, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, TRIGGER)
    registry.apply()
    result = _status(registry)
    assert result.status is PatchStatus.PENDING
    assert TRIGGER in result.reason


def test_not_needed(fake_engine) -> None:
    class Absent(FeaturePatch):
        name = "fake-absent"

        def not_needed(self) -> str | None:
            return "model not in this release"

    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(Absent())
    reg.apply()
    result = _status(reg, "fake-absent")
    assert (result.status, result.reason) == (PatchStatus.NOT_NEEDED, "model not in this release")


def test_failure_midway_is_undone_and_logged_once(fake_engine, caplog) -> None:
    class Broken(FeaturePatch):
        name = "fake-broken"

        def apply(self, ctx: PatchContext) -> None:
            ctx.set_attr(sys.modules[TRIGGER], "feature", _fast_feature)
            raise AttributeError("Engine has no attribute 'renamed_method'")

    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(Broken())
    with caplog.at_level(logging.WARNING, logger="vlm_fastpath"):
        reg.apply()
        reg.apply()
    result = _status(reg, "fake-broken")
    assert result.status is PatchStatus.FAILED
    assert "renamed_method" in result.reason
    assert fake_engine.target.feature is _original_feature  # partial change undone
    warnings = [r for r in caplog.records if "fake-broken" in r.getMessage()]
    assert len(warnings) == 1


def test_detector_exception_is_contained(fake_engine) -> None:
    class BadDetector(FeaturePatch):
        name = "fake-bad-detector"

        def upstream_equivalent(self) -> str | None:
            raise KeyError("moved")

    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(BadDetector())
    reg.apply()
    result = _status(reg, "fake-bad-detector")
    assert result.status is PatchStatus.FAILED and "KeyError" in result.reason


@pytest.mark.parametrize(
    ("env", "value", "reason"),
    [
        ("VLM_FASTPATH", "0", "VLM_FASTPATH=0"),
        ("VLM_FASTPATH_PATCHES", "other-patch", "VLM_FASTPATH_PATCHES"),
        ("VLM_FASTPATH_SKIP", "x, fake-feature", "VLM_FASTPATH_SKIP"),
    ],
)
def test_user_controls_disable(registry, fake_engine, monkeypatch, env, value, reason) -> None:
    monkeypatch.setenv(env, value)
    registry.apply()
    result = _status(registry)
    assert result.status is PatchStatus.DISABLED and reason in result.reason
    assert fake_engine.target.feature is _original_feature


def test_allow_list_selects(registry, monkeypatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_PATCHES", "fake-feature")
    registry.apply()
    assert _status(registry).status is PatchStatus.APPLIED


def test_apply_patches_argument(registry, fake_engine) -> None:
    registry.apply(patches=["something-else"])
    assert _status(registry).status is PatchStatus.DISABLED
    registry.apply(patches=["fake-feature"])
    assert _status(registry).status is PatchStatus.APPLIED


def test_concurrent_apply_applies_once(registry, fake_engine) -> None:
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        registry.apply()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert FeaturePatch.applies == 1
    assert fake_engine.target.feature is _fast_feature


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_keeps_patch_and_can_revert(registry, fake_engine) -> None:
    registry.apply()
    pid = os.fork()
    if pid == 0:  # child: must see the patch, and revert must work (no inherited lock held)
        ok = fake_engine.target.feature is _fast_feature
        registry.revert()
        ok = ok and fake_engine.target.feature is _original_feature
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert fake_engine.target.feature is _fast_feature  # parent unaffected


def test_context_undo_deletes_attributes_it_added() -> None:
    holder = types.SimpleNamespace()
    ctx = PatchContext()
    ctx.set_attr(holder, "added", 1)
    ctx.undo()
    assert not hasattr(holder, "added")


def test_context_restores_inherited_class_attribute() -> None:
    class Base:
        def method(self) -> str:
            return "base"

    class Child(Base):
        pass

    ctx = PatchContext()
    ctx.set_attr(Child, "method", lambda self: "patched")
    assert Child().method() == "patched"
    ctx.undo()
    assert "method" not in Child.__dict__ and Child().method() == "base"


def test_revert_also_restores_copies_made_while_patched(registry, fake_engine, monkeypatch) -> None:
    registry.apply()
    late = types.ModuleType(f"{ENGINE}.late_import")
    late.feature = fake_engine.target.feature  # imported after the patch: holds the replacement
    monkeypatch.setitem(sys.modules, f"{ENGINE}.late_import", late)
    assert late.feature is _fast_feature
    registry.revert()
    assert late.feature is _original_feature


def test_trigger_missing_from_the_release_is_not_needed(fake_engine, monkeypatch) -> None:
    class FutureModel(FeaturePatch):
        name = "fake-future-model"
        trigger = "fakeengine.models.not_in_this_release"

    package = types.ModuleType("fakeengine.models")
    package.__path__ = []  # an imported package that has no such submodule
    monkeypatch.setitem(sys.modules, "fakeengine.models", package)
    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(FutureModel())
    preview = _status(reg, "fake-future-model")
    assert preview.status is PatchStatus.NOT_NEEDED and "not_in_this_release" in preview.reason
    reg.apply()
    result = _status(reg, "fake-future-model")
    assert result.status is PatchStatus.NOT_NEEDED and "1.4.0" in result.reason


def test_trigger_of_an_unimported_package_stays_pending(fake_engine, monkeypatch) -> None:
    class Elsewhere(FeaturePatch):
        name = "fake-elsewhere"
        trigger = "fakeengine.unloaded_pkg.mod"

    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(Elsewhere())
    reg.apply()
    assert _status(reg, "fake-elsewhere").status is PatchStatus.PENDING
