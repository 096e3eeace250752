"""SGLang patches that hand out objects, after quarantine (issue #31), on stand-in modules.

The Kimi CPU processor (``sglang-kimi-k25-fused-cpu-processor``): the fused processor a
``KimiGPUProcessorWrapper`` built while the patch was applied answers every call with the
checkpoint's processor once the patch is faulted.

The deferred owner: payloads still in flight are read.

The K2.5 owner's ``get_image_feature`` wrapper is the only reader of deferred payloads; the
senders (in the tokenizer process, with their own registry) keep deferring after the owner
process quarantines. Reverting the wrapper would hand the release's ``get_image_feature`` the
per-patch content digests the sender puts in ``feature``. The shared held-object check runs
against a stand-in of SGLang's model module (the release's method concatenates
``item.feature``, as ``get_image_feature`` feeds the tower); the reference is the release
without the plugin, whose ``feature`` is the checkpoint processor's ``pixel_values``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from PIL import Image

from fixtures.held_objects import HeldCase, check_held_object, forget_faults
from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from tests.kimi_integration.helpers import rand_array
from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.kimi_integration.deferred import DeferredKimiProcessor
from vlm_fastpath.patches.core import registry as registry_module
from vlm_fastpath.patches.core.registry import PatchRegistry
from vlm_fastpath.patches.sglang.deferred_preprocessing import _contained, models_kimi_k25
from vlm_fastpath.patches.sglang.deferred_preprocessing._shared import ITEM_KEY, digest_feature
from vlm_fastpath.patches.sglang.kimi_cpu_processor import multimodal_processors_kimi_k25 as cpu

OWNER = models_kimi_k25.PATCH


def _release_get_image_feature(self: Any, items: list[Any]) -> torch.Tensor:
    """The release's own ``get_image_feature``, as far as pixels go: the items' features."""
    return torch.cat([item.feature for item in items])


class _Item:
    def __init__(self, feature: torch.Tensor, data: dict[str, Any]) -> None:
        self.feature = feature
        self.model_specific_data = data


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> PatchRegistry:
    for name in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        monkeypatch.delenv(name, raising=False)
    top = types.ModuleType("sglang")
    top.__version__ = "0.5.20"
    models = types.ModuleType(models_kimi_k25.KIMI_K25)
    models.KimiK25ForConditionalGeneration = type(
        "KimiK25ForConditionalGeneration", (), {"get_image_feature": _release_get_image_feature}
    )
    monkeypatch.setitem(sys.modules, "sglang", top)
    monkeypatch.setitem(sys.modules, models_kimi_k25.KIMI_K25, models)
    registry = PatchRegistry()
    registry._loaded_catalog = True
    registry.register(models_kimi_k25.KimiK25DeferredOwnerPatch())
    monkeypatch.setattr(registry_module, "REGISTRY", registry)
    yield registry
    forget_faults()
    registry.revert()


def _owner_case(registry: PatchRegistry) -> HeldCase:
    image = Image.fromarray(rand_array(3, 301, 205, 3))
    medias = [{"type": "image", "image": image}]
    payload = DeferredKimiProcessor(KIMI_K25_CFG).prepare(medias)
    plan = payload.medias[0].plan
    model_cls = sys.modules[models_kimi_k25.KIMI_K25].KimiK25ForConditionalGeneration

    def in_flight() -> _Item:  # what the sender ships: a digest in ``feature``, the payload
        data = {ITEM_KEY: [payload], "grid_thws": payload.grid_thws}
        return _Item(digest_feature(payload, plan.num_patches), data)

    def reference() -> torch.Tensor:  # the release without the plugin: eager pixels
        pixels = ref_preprocess(medias, KIMI_K25_CFG)[0]
        return model_cls().get_image_feature([_Item(pixels, {})])

    def build() -> Any:
        registry.apply(engine="sglang")
        return model_cls()  # the engine's model instance, across requests

    return HeldCase(
        patch=OWNER,
        reference=reference,
        build=build,
        inject=lambda mp, _held, fast: mp.setattr(_contained, "materialize_payloads", fast),
        call=lambda held: held.get_image_feature([in_flight()]),
        equal=lambda ours, theirs: ours.dtype == theirs.dtype and torch.equal(ours, theirs),
    )


def test_owner_reads_payloads_in_flight_after_quarantine(fake_sglang, monkeypatch):
    rows = check_held_object(_owner_case(fake_sglang), monkeypatch)
    assert [state for _, state, _ in rows] == ["applied", "applied", *["faulted"] * 3]
    reason = next(r.reason for r in fake_sglang.status() if r.name == OWNER)
    assert "left installed" in reason and fake_sglang.installed() == [OWNER]
    fake_sglang.apply(engine="sglang")  # never applied a second time over itself
    assert fake_sglang.installed() == [OWNER]
    forget_faults()  # tests only: applied again, and a revert restores the release's method
    assert next(r.status.value for r in fake_sglang.status() if r.name == OWNER) == "applied"
    fake_sglang.revert()
    model = sys.modules[models_kimi_k25.KIMI_K25].KimiK25ForConditionalGeneration
    assert model.__dict__["get_image_feature"] is _release_get_image_feature


# -- the Kimi CPU processor ----------------------------------------------------------------------
class _CheckpointProcessor:
    """Stands in for the checkpoint's remote-code media processor (its arithmetic)."""

    def __init__(self) -> None:
        self.media_proc_cfg = dict(KIMI_K25_CFG)

    def preprocess(self, medias: list[Any], **_kwargs: Any) -> dict[str, torch.Tensor]:
        pixels, grids, _ = ref_preprocess(medias, self.media_proc_cfg)
        return {"pixel_values": pixels, "grid_thws": grids}


def _wrapper_init(self: Any, hf_processor: Any) -> None:
    self.hf_processor = hf_processor
    self.media_processor = hf_processor.media_processor


@pytest.fixture
def fake_sglang_cpu(monkeypatch: pytest.MonkeyPatch) -> PatchRegistry:
    for name in ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        monkeypatch.delenv(name, raising=False)
    top = types.ModuleType("sglang")
    top.__version__ = "0.5.20"
    procs = types.ModuleType(cpu.KIMI_PROCESSOR)
    procs.KimiGPUProcessorWrapper = type(
        "KimiGPUProcessorWrapper", (), {"__init__": _wrapper_init, "_cpu_call": None}
    )
    monkeypatch.setitem(sys.modules, "sglang", top)
    monkeypatch.setitem(sys.modules, cpu.KIMI_PROCESSOR, procs)
    registry = PatchRegistry()
    registry._loaded_catalog = True
    registry.register(cpu.KimiFusedCpuProcessorPatch())
    monkeypatch.setattr(registry_module, "REGISTRY", registry)
    yield registry
    forget_faults()
    registry.revert()


def _cpu_case(registry: PatchRegistry) -> HeldCase:
    medias = [{"type": "image", "image": Image.fromarray(rand_array(4, 333, 517, 3))}]
    wrapper_cls = sys.modules[cpu.KIMI_PROCESSOR].KimiGPUProcessorWrapper

    def held_processor() -> Any:  # what the wrapper preprocesses with
        hf_processor = types.SimpleNamespace(media_processor=_CheckpointProcessor())
        return wrapper_cls(hf_processor).media_processor

    def build() -> Any:
        registry.apply(engine="sglang")
        processor = held_processor()
        assert isinstance(processor, FusedKimiProcessor), type(processor)
        return processor

    def equal(ours: Any, theirs: Any) -> bool:
        return all(torch.equal(ours[k], theirs[k]) for k in ("pixel_values", "grid_thws"))

    return HeldCase(
        patch=cpu.PATCH,
        reference=lambda: held_processor().preprocess(medias),
        build=build,
        inject=lambda mp, _held, fast: mp.setattr(FusedKimiProcessor, "preprocess", fast),
        call=lambda held: held.preprocess(medias),
        equal=equal,
    )


def test_kimi_cpu_processor_is_the_checkpoints_after_quarantine(fake_sglang_cpu, monkeypatch):
    rows = check_held_object(_cpu_case(fake_sglang_cpu), monkeypatch)
    assert [state for _, state, _ in rows] == ["applied", "applied", *["faulted"] * 3]
    assert fake_sglang_cpu.installed() == []  # reverted: wrappers built afterwards keep theirs
