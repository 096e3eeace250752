"""Fault injection: a fast path that raises is answered by vLLM's own code, then quarantined.

Per family on the release where the patch applies: the Kimi processor (``vllm-kimi-processor``
up to 0.24, ``vllm-kimi-fused-processor`` from 0.25) and MoonViT ``max_seqlen`` (0.22). The
injected fault is a ``RuntimeError`` inside our code; the answer must equal the unpatched
engine's, and after ``VLM_FASTPATH_FAULT_LIMIT`` faults ``status()`` reports ``faulted``.
"""

from __future__ import annotations

import pytest
import torch
from packaging.version import Version

import vlm_fastpath
from fixtures.vllm_kimi_model import clear_processor_caches, processing_info
from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.core import containment

from .test_kimi_processor import _medias
from .test_moonvit_syncs import _equal, run_forward, tower, vit_module  # noqa: F401
from .test_qwen_processor import _hf_image_processor, checkpoints, processors  # noqa: F401

FUSED_UPSTREAM = Version("0.25")


def _boom(*_args, **_kwargs):
    raise RuntimeError("injected fault in the fast path")


@pytest.fixture(autouse=True)
def _clean_faults(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "100")
    containment.reset()
    yield
    containment.reset()
    REGISTRY.clear_faults()


def _processor_patch(vllm_version) -> str:
    return "vllm-kimi-fused-processor" if vllm_version >= FUSED_UPSTREAM else "vllm-kimi-processor"


def _state(name: str) -> tuple[str, str]:
    result = next(r for r in vlm_fastpath.status("vllm") if r["name"] == name)
    return result["status"], result["reason"]


def test_processor_fault_answers_with_vllms_processor(model_dir, vllm_version, monkeypatch):
    name = _processor_patch(vllm_version)
    medias = _medias()[:3]
    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    theirs = processing_info(model_dir).image_processor.preprocess(medias, return_tensors="pt")
    vlm_fastpath.apply("vllm")
    clear_processor_caches()
    assert _state(name)[0] == "applied"
    processor = processing_info(model_dir).image_processor
    assert type(processor).__name__ == "FastpathKimiVisionProcessor"
    monkeypatch.setattr(processor.fused, "preprocess", _boom)
    mine = processor.preprocess(medias, return_tensors="pt")
    assert torch.equal(mine["pixel_values"], theirs["pixel_values"])
    assert torch.equal(mine["grid_thws"], theirs["grid_thws"])
    assert containment.LEDGER.counts == {name: 1}


def test_processor_fault_under_uint8_transport(model_dir, vllm_version, monkeypatch):
    """Asked for uint8 (device normalization), the engine's processor answers in float32."""
    if vllm_version >= Version("0.32"):
        pytest.skip("vLLM's own processor takes the normalize flags from 0.32")
    medias = _medias()[:2]
    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    theirs = processing_info(model_dir).image_processor.preprocess(medias, return_tensors="pt")
    vlm_fastpath.apply("vllm")
    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    monkeypatch.setattr(processor.fused, "preprocess", _boom)
    out = processor.preprocess(medias, return_tensors="pt", do_rescale=False,
                               do_normalize=False)
    assert out["pixel_values"].dtype == torch.float32  # normalized: the model passes it on
    assert torch.equal(out["pixel_values"], theirs["pixel_values"])


def test_processor_input_errors_are_not_faults(model_dir):
    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    with pytest.raises(ValueError, match="unsupported image type"):
        processor.preprocess([{"type": "image", "image": 3.5}], return_tensors="pt")
    assert containment.LEDGER.counts == {}


def test_processor_quarantined_after_the_limit(model_dir, vllm_version, monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "2")
    name = _processor_patch(vllm_version)
    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    monkeypatch.setattr(processor.fused, "preprocess", _boom)
    medias = _medias()[:1]
    for _ in range(2):
        processor.preprocess(medias, return_tensors="pt")
    status, reason = _state(name)
    assert status == "faulted" and "2 run-time fault" in reason
    assert name not in REGISTRY.installed()
    clear_processor_caches()
    again = processing_info(model_dir).image_processor  # vLLM's own from now on
    assert type(again).__name__ != "FastpathKimiVisionProcessor"
    vlm_fastpath.apply("vllm")
    assert _state(name)[0] == "faulted"


def _meta_image(family: str) -> torch.Tensor:
    shape = (40, 56, 3) if family == "kimi" else (3, 40, 56)
    return torch.empty(shape, dtype=torch.uint8, device="meta")


@pytest.mark.parametrize("family", ["kimi", "qwen2.5"])
def test_bad_input_never_quarantines(family, model_dir, vllm_version, processors):  # noqa: F811
    """A data-less (meta) tensor, sent past the fault limit, fails each call as vLLM's own
    processor fails it (or with our input error) and is never counted (#31 item 3)."""
    image = _meta_image(family)
    if family == "kimi":
        name = _processor_patch(vllm_version)
        clear_processor_caches()
        held = processing_info(model_dir).image_processor

        def call():
            return held.preprocess([{"type": "image", "image": image}], return_tensors="pt")
        for _ in range(5):  # the limit is 100 here; 3 is the default
            with pytest.raises(ValueError, match="'meta' device") as info:
                call()
            assert type(info.value).__name__ == "KimiInputError"
    else:
        name = "vllm-qwen-vl-image-processor"
        processor = processors["qwen2.5"][1]
        vlm_fastpath.revert("vllm")
        theirs = _outcome(_hf_image_processor(processor), image)  # what transformers does
        vlm_fastpath.apply("vllm")
        held = _hf_image_processor(processor)
        assert type(held).__name__.startswith("Fastpath")
        for _ in range(5):
            assert _outcome(held, image) == theirs
    assert containment.LEDGER.counts == {}
    assert _state(name)[0] == "applied"


def _outcome(image_processor, image) -> tuple:
    """What one call gives, comparable across processors: an error type, or tensor metadata
    (a meta tensor has no values to compare)."""
    try:
        out = image_processor.preprocess([image], return_tensors="pt")
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return ("raised", type(exc).__name__)
    return ("returned", *sorted(
        (key, tuple(v.shape), str(v.dtype), v.device.type) for key, v in out.items()
    ))


@pytest.mark.parametrize("target", ["_attention", "host_grid"])
def test_moonvit_fault_answers_with_the_release_forward(tower, target, monkeypatch):  # noqa: F811
    from vlm_fastpath.patches.vllm.moonvit_max_seqlen import models_kimi_k25_vit as ours

    REGISTRY.revert(engine="vllm")
    run_forward(tower, "TORCH_SDPA")
    before, _ = run_forward(tower, "TORCH_SDPA")
    REGISTRY.apply(engine="vllm")
    assert _state("vllm-moonvit-max-seqlen")[0] == "applied"
    monkeypatch.setattr(ours, target, _boom)
    after, _ = run_forward(tower, "TORCH_SDPA")
    assert _equal(before, after)
    assert containment.LEDGER.counts["vllm-moonvit-max-seqlen"] >= 1
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "1")
    run_forward(tower, "TORCH_SDPA")
    assert _state("vllm-moonvit-max-seqlen")[0] == "faulted"
    reverted, _ = run_forward(tower, "TORCH_SDPA")
    assert _equal(before, reverted)
