"""Contracts, not caps, on the installed vLLM: a future release simulated over this one's code.

The installed release reports itself as vLLM 0.99.0 (a version no sweep has seen). Where the
code the patches rely on holds, the processor patches apply and say the release is not
verified; where vLLM's own processor behaves differently (its pixels shifted) or a signature
changed, they stand aside naming the clause, and vLLM keeps its own objects.
"""

from __future__ import annotations

import pytest
import vllm
from packaging.version import Version

import vlm_fastpath
from fixtures.vllm_kimi_model import clear_processor_caches
from vlm_fastpath.patches.adapters import kimi_probe as probe

FUTURE = "0.99.0"
KIMI = "vllm-kimi-fused-processor"
QWEN = ("vllm-qwen-vl-image-processor", "vllm-qwen-vl-video-processor")
FUSED_UPSTREAM = Version("0.25")
QWEN_FROM = Version("0.22")


@pytest.fixture()
def future(monkeypatch, vllm_version):
    """This release's code, reporting vLLM 0.99.0; every decision taken afresh."""
    from vllm.model_executor.models import qwen2_5_vl, qwen2_vl  # noqa: F401 - triggers

    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    monkeypatch.setattr(vllm, "__version__", FUTURE)
    monkeypatch.setattr(probe, "_VERDICTS", {})
    yield vllm_version
    vlm_fastpath.revert("vllm")
    monkeypatch.undo()
    clear_processor_caches()


def _apply() -> dict[str, dict]:
    return {r["name"]: r for r in vlm_fastpath.apply("vllm")}


def test_future_release_applies_where_the_contract_holds(future, kimi_module):
    if future < QWEN_FROM:
        pytest.skip("no processor patch applies to this release's code")
    results = _apply()
    names = [*QWEN[:2]] + ([KIMI] if future >= FUSED_UPSTREAM else [])
    for name in names:
        result = results[name]
        assert result["status"] == "applied", result
        assert result["engine_version"] == FUTURE
        assert f"vllm {FUTURE} not verified by the sweep" in result["reason"], result
        assert result["reason"].endswith("contract held)"), result
    if future >= FUSED_UPSTREAM:
        from vlm_fastpath.patches.adapters.kimi_vision import FastpathKimiVisionProcessor

        assert kimi_module.KimiK25FusedVisionProcessor is FastpathKimiVisionProcessor


def _shifted(original):
    def preprocess(self, medias, return_tensors=None, do_rescale=True, do_normalize=True):
        out = original(self, medias, return_tensors=return_tensors, do_rescale=do_rescale,
                       do_normalize=do_normalize)
        out["pixel_values"] = out["pixel_values"] + 1  # the engine's pixels moved
        return out

    return preprocess


def test_engine_processor_behaving_differently_stands_aside(future, kimi_module, monkeypatch):
    if future < FUSED_UPSTREAM:
        pytest.skip("no fused Kimi processor in this release")
    cls = kimi_module.KimiK25FusedVisionProcessor
    monkeypatch.setattr(cls, "preprocess", _shifted(cls.__dict__["preprocess"]))
    result = _apply()[KIMI]
    assert result["status"] == "stood-aside", result
    assert "contract not met: behaviour:" in result["reason"]
    assert "pixel_values differs" in result["reason"]
    assert f"{FUTURE} not verified by the sweep" in result["reason"]
    assert kimi_module.KimiK25FusedVisionProcessor is cls  # vLLM keeps its own


def test_engine_processor_signature_change_stands_aside(future, kimi_module, monkeypatch):
    if future < FUSED_UPSTREAM:
        pytest.skip("no fused Kimi processor in this release")
    cls = kimi_module.KimiK25FusedVisionProcessor
    original = cls.__dict__["preprocess"]

    def preprocess(self, items, return_tensors=None):  # renamed first parameter
        return original(self, items, return_tensors=return_tensors)

    monkeypatch.setattr(cls, "preprocess", preprocess)
    result = _apply()[KIMI]
    assert result["status"] == "stood-aside", result
    assert "structure:" in result["reason"] and "preprocess(self, items" in result["reason"]
    assert kimi_module.KimiK25FusedVisionProcessor is cls


def test_qwen_signature_change_stands_aside(future, monkeypatch):
    if future < QWEN_FROM:
        pytest.skip("no Qwen patch for this release")
    from vllm.multimodal.processing.context import InputProcessingContext

    cls = InputProcessingContext
    original = cls.__dict__["get_hf_processor"]

    def get_hf_processor(self, processor_cls, tokenizer, /, **kwargs):  # new arguments
        return original(self, processor_cls, **kwargs)

    monkeypatch.setattr(cls, "get_hf_processor", get_hf_processor)
    result = _apply()["vllm-qwen-vl-image-processor"]
    assert result["status"] == "stood-aside", result
    assert "structure:" in result["reason"] and "get_hf_processor" in result["reason"]
    assert cls.__dict__["get_hf_processor"] is get_hf_processor


def test_another_configuration_is_probed_before_its_first_call(vllm_version, monkeypatch):
    """A checkpoint whose media_proc_cfg is not the one probed at apply time is probed itself;
    where vLLM's processor differs under it, that processor answers every call."""
    if vllm_version < FUSED_UPSTREAM:
        pytest.skip("no fused Kimi processor in this release")
    import numpy as np
    import torch

    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.patches.adapters.kimi_vision import FastpathKimiVisionProcessor

    engine_class = FastpathKimiVisionProcessor.engine_class
    assert engine_class is not None  # the patch is applied (autouse fixture)
    default = probe.default_media_proc_cfg()
    other = dict(default, image_mean=[0.25, 0.5, 0.75])
    original = engine_class.__dict__["preprocess"]

    def preprocess(self, medias, return_tensors=None, do_rescale=True, do_normalize=True):
        out = original(self, medias, return_tensors=return_tensors, do_rescale=do_rescale,
                       do_normalize=do_normalize)
        if list(self.media_proc_cfg["image_mean"]) != list(default["image_mean"]):
            out["pixel_values"] = out["pixel_values"] + 1  # differs only under `other`
        return out

    monkeypatch.setattr(engine_class, "preprocess", preprocess)
    monkeypatch.setattr(probe, "_VERDICTS", {})
    image = probe.probe_image("RGB", 300, 200)

    def pixels(processor) -> torch.Tensor:
        out = processor.preprocess([{"type": "image", "image": image}])
        return torch.as_tensor(np.asarray(out["pixel_values"]))

    ours_other = FastpathKimiVisionProcessor(other)
    assert torch.equal(pixels(ours_other), pixels(engine_class(other)))  # vLLM's answer
    reason = next(r for r in vlm_fastpath.status("vllm") if r["name"] == KIMI)["reason"]
    assert "keeps the engine's processor" in reason and "behaviour:" in reason, reason
    ours_default = FastpathKimiVisionProcessor(default)  # the probed configuration: ours
    want = FusedKimiProcessor(default).preprocess(
        [{"type": "image", "image": image}], return_tensors="pt")["pixel_values"]
    assert torch.equal(pixels(ours_default), want)
    assert ours_default.__dict__["_vlm_probe"] is None
