"""vLLM's own Kimi K2.5 code paths hand out our processor, with the reference's bytes."""

from __future__ import annotations

import io
import json
import sys

import PIL.Image
import pytest
import torch
from packaging.version import Version

import vlm_fastpath
from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from fixtures.vllm_kimi_model import (
    MEDIA_PAD,
    MEDIA_PAD_ID,
    clear_processor_caches,
    processing_info,
)
from fixtures.vllm_requests import kimi_image as _image
from fixtures.vllm_requests import kimi_medias as _medias

vllm = pytest.importorskip("vllm")

FUSED_UPSTREAM = Version("0.25")
UINT8_UPSTREAM = Version("0.32")


def _status() -> dict[str, dict]:
    return {r["name"]: r for r in vlm_fastpath.status("vllm")}


@pytest.fixture()
def info(model_dir):
    clear_processor_caches()
    return processing_info(model_dir)


def test_status_per_version(vllm_version):
    status = _status()
    expected = (
        {
            "vllm-processor-cls-overrides": "upstream",
            "vllm-kimi-processor": "upstream",
            "vllm-kimi-fused-processor": "applied",
        }
        if vllm_version >= FUSED_UPSTREAM
        else {
            "vllm-processor-cls-overrides": "applied",
            "vllm-kimi-processor": "applied",
            "vllm-kimi-fused-processor": "unsupported-version",
        }
    )
    assert {name: status[name]["status"] for name in expected} == expected
    assert all(r["engine_version"] == vllm.__version__ for r in status.values())


def test_processing_info_hands_out_ours(info):
    from vlm_fastpath.patches.adapters.kimi_vision import FastpathKimiVisionProcessor

    assert isinstance(info.image_processor, FastpathKimiVisionProcessor)
    assert info.hf_processor.image_processor is info.image_processor
    assert info.media_tokens_calculator({"type": "image", "image": _image(0, 2048, 2048)}) == 4225
    assert info.image_processor.num_frames_per_chunk == KIMI_K25_CFG["temporal_merge_kernel_size"]


def test_outputs_equal_reference(info):
    medias = _medias()
    ref_pixels, ref_grids, ref_tokens = ref_preprocess(medias, KIMI_K25_CFG)
    out = info.image_processor.preprocess(medias, return_tensors="pt")
    assert out["pixel_values"].dtype == torch.float32
    assert torch.equal(out["pixel_values"], ref_pixels)
    assert torch.equal(out["grid_thws"], ref_grids)
    assert [info.media_tokens_calculator(m) for m in medias] == ref_tokens


def test_hf_processor_expands_placeholders(info):
    medias = _medias()[:2]
    _, _, ref_tokens = ref_preprocess(medias, KIMI_K25_CFG)
    out = info.hf_processor(text=f"a{MEDIA_PAD}b{MEDIA_PAD}", vision_chunks=medias)
    ids = list(out["input_ids"][0])
    assert ids.count(MEDIA_PAD_ID) == sum(ref_tokens)
    assert torch.equal(out["pixel_values"], ref_preprocess(medias, KIMI_K25_CFG)[0])


def test_uint8_output_for_device_normalization(info, vllm_version):
    medias = _medias()[:3]
    ref_pixels, _, _ = ref_preprocess(medias, KIMI_K25_CFG, uint8=True)
    out = info.image_processor.preprocess(
        medias, return_tensors="pt", do_rescale=False, do_normalize=False
    )
    assert out["pixel_values"].dtype == torch.uint8
    assert torch.equal(out["pixel_values"], ref_pixels)
    if vllm_version >= UINT8_UPSTREAM:  # vLLM's own processor call passes the flags through
        out = info.hf_processor(vision_chunks=medias, do_rescale=False, do_normalize=False)
        assert torch.equal(out["pixel_values"], ref_pixels)


def test_serialization_round_trip(info):
    processor = info.image_processor
    as_dict = json.loads(processor.to_json_string())
    assert as_dict["media_proc_cfg"]["patch_size"] == 14
    again = type(processor).from_dict(as_dict)
    assert again.media_proc_cfg == processor.media_proc_cfg
    assert "FastpathKimiVisionProcessor" in repr(processor)


def test_an_image_decoding_is_resized_by_the_processor_vllm_holds(info, monkeypatch):
    """The processor vLLM holds is offered to the decode layer: a large image's bands (or
    patches, for an image kept at its size) are made while it decodes, and vLLM's processor
    call takes them (the reference's bytes); quarantined, the offer starts nothing."""
    from fixtures import decode_corpus
    from fixtures.speculation_waits import wait_picked_up
    from vlm_fastpath.imaging import decode, row_progress
    from vlm_fastpath.imaging.decode import layer, speculation
    from vlm_fastpath.patches.core.containment import LEDGER

    processor = info.image_processor
    offer = speculation.offered()
    assert offer is not None and offer.fast is processor.fused
    if decode.unavailable_reason() is not None or not row_progress.supported():
        pytest.skip("no fast decoding, or rows cannot be followed, here")
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    fills = []
    fill = processor.fused._fill
    monkeypatch.setattr(processor.fused, "_fill",
                        lambda *a, **k: (fills.append(1), fill(*a, **k))[1])
    for size in ((3001, 2203), (1501, 2003)):  # resized; kept at its size (padded)
        data = decode_corpus.save(PIL.Image.fromarray(decode_corpus.photo_like(*size)), "JPEG")
        image = decode.decode_bytes(data)
        wait_picked_up(image)  # work still queued when the call comes is the call's (by design)
        out = processor.preprocess([{"type": "image", "image": image}], return_tensors="pt")
        assert not fills, size
        reference = PIL.Image.open(io.BytesIO(data))
        ref_pixels, _, _ = ref_preprocess([{"type": "image", "image": reference}],
                                          KIMI_K25_CFG)
        assert torch.equal(out["pixel_values"], ref_pixels), size
    monkeypatch.setitem(LEDGER.disabled, processor.serving_patch, "quarantined (test)")
    assert offer.start("RGB", None, None) is None


def test_equals_vllm_fused_processor(model_dir, vllm_version):
    if vllm_version < FUSED_UPSTREAM:
        pytest.skip("no fused processor upstream before 0.25")
    fused = sys.modules["vllm.transformers_utils.processors.kimi_k25_vision_fused"]
    vlm_fastpath.revert("vllm")
    upstream_cls = fused.KimiK25FusedVisionProcessor
    assert upstream_cls.__module__ == fused.__name__
    upstream = upstream_cls(dict(KIMI_K25_CFG))
    medias = _medias()[:3]
    theirs = upstream.preprocess([dict(m) for m in medias], return_tensors="pt")
    vlm_fastpath.apply("vllm")
    ours = fused.KimiK25FusedVisionProcessor(dict(KIMI_K25_CFG))
    mine = ours.preprocess(medias, return_tensors="pt")
    assert torch.equal(mine["pixel_values"], theirs["pixel_values"])
    assert torch.equal(mine["grid_thws"], theirs["grid_thws"])


def test_revert_restores_vllm_objects(model_dir, kimi_module, vllm_version):
    proc = sys.modules["vllm.transformers_utils.processor"]
    vlm_fastpath.revert("vllm")
    assert proc.cached_get_image_processor.__wrapped__ is proc.get_image_processor
    assert kimi_module.cached_get_image_processor is proc.cached_get_image_processor
    assert proc.get_image_processor.__module__ == proc.__name__
    assert not hasattr(proc.get_image_processor, "__vlm_fastpath_original__")
    if vllm_version >= FUSED_UPSTREAM:
        fused = sys.modules["vllm.transformers_utils.processors.kimi_k25_vision_fused"]
        assert kimi_module.KimiK25FusedVisionProcessor is fused.KimiK25FusedVisionProcessor
        assert fused.KimiK25FusedVisionProcessor.__module__ == fused.__name__
    assert all(r["status"] == "pending" for r in vlm_fastpath.status("vllm"))
    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    assert not type(processor).__module__.startswith("vlm_fastpath")


def test_skip_by_name(monkeypatch, model_dir, vllm_version):
    name = "vllm-kimi-fused-processor" if vllm_version >= FUSED_UPSTREAM else "vllm-kimi-processor"
    vlm_fastpath.revert("vllm")
    monkeypatch.setenv("VLM_FASTPATH_SKIP", name)
    vlm_fastpath.apply("vllm")
    assert _status()[name]["status"] == "disabled"
    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    assert not type(processor).__module__.startswith("vlm_fastpath")


def test_missing_target_stands_aside(monkeypatch, model_dir, kimi_module, vllm_version):
    if vllm_version >= FUSED_UPSTREAM:
        name, attr = "vllm-kimi-fused-processor", "KimiK25FusedVisionProcessor"
    else:
        name, attr = "vllm-kimi-processor", "cached_get_image_processor"
    vlm_fastpath.revert("vllm")
    monkeypatch.delattr(kimi_module, attr)  # as if upstream renamed it
    results = {r["name"]: r for r in vlm_fastpath.apply("vllm")}
    if vllm_version >= FUSED_UPSTREAM:  # a contract clause: stands aside, naming it
        assert results[name]["status"] == "stood-aside"
        assert f"structure: vllm.model_executor.models.kimi_k25 has no class {attr}" in (
            results[name]["reason"]
        )
    else:
        assert results[name]["status"] == "failed"
        assert "cached_get_image_processor" in results[name]["reason"]
    assert not hasattr(kimi_module, attr)  # nothing half-applied
    vlm_fastpath.revert("vllm")
    monkeypatch.undo()
    assert results[name]["engine_version"] == vllm.__version__


def test_model_absent_is_not_needed(monkeypatch, kimi_module, vllm_version):
    name = "vllm-kimi-fused-processor" if vllm_version >= FUSED_UPSTREAM else "vllm-kimi-processor"
    vlm_fastpath.revert("vllm")
    monkeypatch.delattr(kimi_module, "KimiK25ProcessingInfo")
    results = {r["name"]: r for r in vlm_fastpath.apply("vllm")}
    assert results[name]["status"] == "not-needed", results[name]
    assert "KimiK25ProcessingInfo" in results[name]["reason"]
    vlm_fastpath.revert("vllm")
    monkeypatch.undo()


def test_revert_reaches_a_processor_vllm_cached_before_it(model_dir, vllm_version, monkeypatch):
    """The kill switch reaches held objects: the Kimi processor vLLM built (and cached) while
    the patch was applied answers with vLLM's own code after ``revert``, and ours again once
    the patch is back."""
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.patches.adapters.kimi_vision import FastpathKimiVisionProcessor

    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    medias = _medias()[:2]
    theirs = processing_info(model_dir).image_processor.preprocess(medias, return_tensors="pt")
    vlm_fastpath.apply("vllm")
    clear_processor_caches()
    held = processing_info(model_dir).image_processor  # built and cached with the patch on
    assert isinstance(held, FastpathKimiVisionProcessor)
    calls: list[int] = []
    original = FusedKimiProcessor.preprocess
    monkeypatch.setattr(FusedKimiProcessor, "preprocess",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    try:
        vlm_fastpath.revert("vllm")
        after = held.preprocess(medias, return_tensors="pt")
        assert calls == [], "a processor held across revert still ran ours"
        for key in ("pixel_values", "grid_thws"):
            assert torch.equal(torch.as_tensor(after[key]), torch.as_tensor(theirs[key])), key
        vlm_fastpath.apply("vllm")
        held.preprocess(medias, return_tensors="pt")
        assert calls, "the re-applied patch did not serve the held processor"
    finally:
        vlm_fastpath.apply("vllm")
        clear_processor_caches()
