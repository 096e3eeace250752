"""Objects vLLM holds keep the engine's behaviour after their patch is quarantined (#31).

One shared check (``fixtures/held_objects.py``) per patch that hands out objects: the
Kimi processor (``vllm-kimi-fused-processor`` from 0.25, ``vllm-kimi-processor`` before), the
Qwen2.5-VL twin, and the uint8-transport view of ``vllm-kimi-device-normalize`` (<0.32). The
reference is the same call with the patches reverted (the in-process ``VLM_FASTPATH=0``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from packaging.version import Version

import vlm_fastpath
from fixtures.held_objects import HeldCase, check_held_object, forget_faults
from fixtures.vllm_kimi_model import clear_processor_caches, processing_info

from .test_kimi_processor import _medias
from .test_qwen_processor import _hf_image_processor, _images, checkpoints, processors  # noqa: F401

FUSED = Version("0.25")
DEVICE_NORMALIZE_UPSTREAM = Version("0.32")


def _tensors_equal(ours: Any, theirs: Any) -> bool:
    keys = [k for k in theirs if isinstance(theirs[k], torch.Tensor)]
    return bool(keys) and all(
        ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k]) for k in keys
    )


def _patch_off(compute: Callable[[], Any]) -> Callable[[], Any]:
    def reference() -> Any:
        vlm_fastpath.revert("vllm")
        clear_processor_caches()
        return compute()

    return reference


def _patch_on(build: Callable[[], Any]) -> Callable[[], Any]:
    def held() -> Any:
        vlm_fastpath.apply("vllm")
        clear_processor_caches()
        return build()

    return held


def _kimi_case(model_dir: Any, vllm_version: Version) -> HeldCase:
    medias = _medias()[:3]
    patch = "vllm-kimi-fused-processor" if vllm_version >= FUSED else "vllm-kimi-processor"

    def image_processor() -> Any:
        return processing_info(model_dir).image_processor

    return HeldCase(
        patch=patch,
        reference=_patch_off(lambda: image_processor().preprocess(medias, return_tensors="pt")),
        build=_patch_on(image_processor),
        inject=lambda mp, held, fast: mp.setattr(held.fused, "preprocess", fast),
        call=lambda held: held.preprocess(medias, return_tensors="pt"),
        equal=_tensors_equal,
        also_gone=() if vllm_version >= DEVICE_NORMALIZE_UPSTREAM
        else ("vllm-kimi-device-normalize",),
    )


def _qwen_case(processor: Any) -> HeldCase:
    images = _images()

    def image_processor() -> Any:
        return _hf_image_processor(processor)

    def build() -> Any:
        twin = image_processor()
        assert type(twin).__name__.startswith("Fastpath"), type(twin)
        return twin

    return HeldCase(
        patch="vllm-qwen-vl-image-processor",
        reference=_patch_off(lambda: image_processor().preprocess(images, return_tensors="pt")),
        build=_patch_on(build),
        inject=lambda mp, held, fast: mp.setattr(held.vlm_fast(), "preprocess", fast),
        call=lambda held: held.preprocess(images, return_tensors="pt"),
        equal=_tensors_equal,
    )


def _device_normalize_case(model_dir: Any) -> HeldCase:
    """The uint8 view vLLM got before the fault: float32 like vLLM's own from then on."""
    medias = _medias()[:2]

    def image_processor() -> Any:
        return processing_info(model_dir).get_hf_processor().image_processor

    def build() -> Any:
        view = image_processor()
        assert getattr(view, "vlm_fastpath_uint8_transport", False), type(view)
        out = view.preprocess(medias, return_tensors="pt")
        assert out["pixel_values"].dtype == torch.uint8  # before the fault: uint8 transport
        return view

    return HeldCase(
        patch="vllm-kimi-processor",
        reference=_patch_off(lambda: image_processor().preprocess(medias, return_tensors="pt")),
        build=_patch_on(build),
        inject=lambda mp, held, fast: mp.setattr(held.wrapped.fused, "preprocess", fast),
        call=lambda held: held.preprocess(medias, return_tensors="pt"),
        equal=_tensors_equal,
        also_gone=("vllm-kimi-device-normalize",),
    )


@pytest.fixture(params=["kimi-processor", "qwen2.5-twin", "kimi-device-normalize"])
def held_case(request, model_dir, vllm_version):
    if request.param == "kimi-processor":
        case = _kimi_case(model_dir, vllm_version)
    elif request.param == "qwen2.5-twin":
        case = _qwen_case(request.getfixturevalue("processors")["qwen2.5"][1])
    else:
        if vllm_version >= DEVICE_NORMALIZE_UPSTREAM:
            pytest.skip("vLLM normalizes Kimi pixels on the device itself from 0.32")
        case = _device_normalize_case(model_dir)
    yield case
    forget_faults()


def test_held_object_is_the_engines_after_quarantine(held_case, monkeypatch):
    rows = check_held_object(held_case, monkeypatch)
    print(f"\n{held_case.patch}: " + "; ".join(
        f"call {n} {state} equal={same}" for n, state, same in rows
    ))
