"""Contracts, not caps: a patch with no upper bound applies where its contract holds.

Against a fake engine: a release newer than any the sweep verified applies when the contract
holds and says it is unverified; a failing clause (structure or behaviour) stands aside naming
it; a signature change is a structure clause; a release the sweep verified says nothing more;
an unverified release whose patched code equals a verified one's says so.
"""

from __future__ import annotations

import sys
import types

import pytest

from vlm_fastpath.patches.core import decisions as decisions_module
from vlm_fastpath.patches.core import fingerprint
from vlm_fastpath.patches.core.base import Patch, PatchContext, PatchStatus, signature_clause
from vlm_fastpath.patches.core.registry import PatchRegistry

ENGINE = "fakecontract"
TRIGGER = "fakecontract.models.proc"


def _engine_pixels(image: list[int]) -> list[int]:
    return [2 * v for v in image]


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    for name in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        monkeypatch.delenv(name, raising=False)
    top = types.ModuleType(ENGINE)
    top.__version__ = "0.99.0"
    target = types.ModuleType(TRIGGER)

    class Processor:
        def preprocess(self, images: list[int], return_tensors: str | None = None) -> list[int]:
            return _engine_pixels(images)

    target.Processor = Processor
    monkeypatch.setitem(sys.modules, ENGINE, top)
    monkeypatch.setitem(sys.modules, TRIGGER, target)
    return types.SimpleNamespace(top=top, target=target, Processor=Processor)


def _our_pixels(images: list[int]) -> list[int]:
    return [v + v for v in images]


class OursPatch(Patch):
    """Ours in place of the engine's processor: no cap, structure and behaviour clauses."""

    name = "fake-ours"
    engine = ENGINE
    versions = ">=0.5"
    backport = False
    trigger = TRIGGER
    modules = (TRIGGER,)
    summary = "ours in place of the engine's"

    def contract(self) -> str | None:
        proc = sys.modules[TRIGGER].Processor
        clause = signature_clause(proc, "preprocess", ("self", "images"))
        if clause:
            return clause
        probe = [0, 1, 7, 255]
        if proc().preprocess(probe) != _our_pixels(probe):
            return "behaviour: the engine's pixels differ from ours on the probe"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = sys.modules[TRIGGER].Processor

        def preprocess(self_proc: object, images: list[int], **_: object) -> list[int]:
            return _our_pixels(images)

        ctx.set_attr(proc, "preprocess", preprocess)


@pytest.fixture
def registry(fake_engine, monkeypatch: pytest.MonkeyPatch) -> PatchRegistry:
    monkeypatch.setattr(decisions_module, "verified_releases", lambda engine, patch: {})
    reg = PatchRegistry()
    reg._loaded_catalog = True
    reg.register(OursPatch())
    return reg


def _result(reg: PatchRegistry):
    return next(r for r in reg.status() if r.name == "fake-ours")


def test_future_release_applies_when_the_contract_holds(registry, fake_engine) -> None:
    registry.apply()
    result = _result(registry)
    assert result.status is PatchStatus.APPLIED
    assert "0.99.0 not verified by the sweep" in result.reason
    assert result.reason.endswith("contract held)")
    assert fake_engine.Processor().preprocess([3]) == [6]


def test_changed_behaviour_stands_aside_naming_the_clause(registry, fake_engine) -> None:
    original = fake_engine.Processor.__dict__["preprocess"]

    def shifted(self, images, return_tensors=None):  # the engine's pixels shifted by one
        return [2 * v + 1 for v in images]

    fake_engine.Processor.preprocess = shifted
    registry.apply()
    result = _result(registry)
    assert result.status is PatchStatus.STOOD_ASIDE
    assert "behaviour:" in result.reason and "0.99.0 not verified" in result.reason
    assert fake_engine.Processor.__dict__["preprocess"] is shifted
    assert original is not shifted


def test_signature_change_stands_aside(registry, fake_engine) -> None:
    def renamed(self, medias, return_tensors=None):
        return _engine_pixels(medias)

    fake_engine.Processor.preprocess = renamed
    registry.apply()
    result = _result(registry)
    assert result.status is PatchStatus.STOOD_ASIDE
    assert "structure:" in result.reason and "preprocess(self, medias" in result.reason
    assert fake_engine.Processor.__dict__["preprocess"] is renamed


def test_missing_symbol_is_a_structure_clause(fake_engine) -> None:
    assert signature_clause(fake_engine.Processor, "gone", ("self",)) == (
        "structure: Processor.gone is missing"
    )
    assert signature_clause(fake_engine.Processor, "preprocess", ("self", "images")) is None


def test_kwargs_marker_in_signatures() -> None:
    class Info:
        def get(self, **kwargs):
            return kwargs

        def get_positional(self, a):
            return a

    assert signature_clause(Info, "get", ("self", "**")) is None
    assert "is not (self, **" in signature_clause(Info, "get_positional", ("self", "**"))


def test_verified_release_has_no_note(registry, fake_engine, monkeypatch) -> None:
    monkeypatch.setattr(
        decisions_module, "verified_releases", lambda engine, patch: {"0.99.0": "x" * 16}
    )
    registry.apply()
    result = _result(registry)
    assert result.status is PatchStatus.APPLIED
    assert result.reason == OursPatch.summary


def test_unverified_release_with_verified_code_names_it(registry, fake_engine, monkeypatch):
    same = fingerprint.code_fingerprint((TRIGGER,), read=lambda name: b"source")
    monkeypatch.setattr(
        decisions_module, "code_fingerprint", lambda modules: same
    )
    monkeypatch.setattr(
        decisions_module, "verified_releases",
        lambda engine, patch: {"0.33.0": same, "0.9.0": same, "0.32.0": "0" * 16},
    )
    registry.apply()
    reason = _result(registry).reason
    assert "0.99.0 not verified by the sweep; its patched code equals verified 0.33.0" in reason


def test_a_contract_that_raises_fails_without_touching_the_engine(
    registry, fake_engine, monkeypatch
) -> None:
    original = fake_engine.Processor.__dict__["preprocess"]

    def broken(self) -> str | None:
        raise RuntimeError("probe crashed")

    monkeypatch.setattr(OursPatch, "contract", broken)
    registry.apply()
    result = _result(registry)
    assert result.status is PatchStatus.FAILED and "probe crashed" in result.reason
    assert fake_engine.Processor.__dict__["preprocess"] is original


def test_fingerprint_matches_the_sweep_formula() -> None:
    """The package's fingerprint is the sweep's (name, NUL, bytes; absent marked; sorted)."""
    import hashlib

    files = {"b.mod": b"two", "a.mod": b"one", "c.mod": None}
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + (files[name] or b"absent"))
    assert fingerprint.fingerprint_files(files.items()) == digest.hexdigest()[:16]
    assert fingerprint.code_fingerprint(files, read=files.get) == digest.hexdigest()[:16]


def test_every_upper_bound_left_is_explained_in_its_folder_header() -> None:
    """No cap without a reason: a capped patch is named under "Upper bound kept" in its header.

    Non-backports (ours in place of the engine's) are not capped at all, but for the ones the
    header lists as kept (not yet run by the sweep on the release above).
    """
    import importlib

    from packaging.specifiers import SpecifierSet

    from vlm_fastpath.patches.core.registry import REGISTRY

    capped = []
    for patch in REGISTRY.patches():
        if not any(s.operator in ("<", "<=") for s in SpecifierSet(patch.versions)):
            continue
        capped.append(patch.name)
        folder = importlib.import_module(type(patch).__module__.rpartition(".")[0])
        kept = (folder.__doc__ or "").partition("Upper bound kept")[2]
        assert kept, f"{patch.name} is capped; its folder header keeps no upper bound"
        assert f"``{patch.name}``" in kept.partition("Delete when")[0], patch.name
    for name in ("vllm-kimi-fused-processor", "vllm-qwen-vl-image-processor",
                 "vllm-qwen-vl-video-processor", "sglang-qwen-vl-cpu-image-processor",
                 "sglang-qwen-vl-cpu-video-processor", "vllm-image-loader-client-errors"):
        assert name not in capped
