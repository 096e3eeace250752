"""Kimi K2.5 CPU preprocessing path: the wrapper's media processor becomes FusedKimiProcessor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.patches import REGISTRY

MEDIA_CFG = {
    "patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
    "in_patch_limit_each_frame": 4096, "in_patch_limit_video": None,
    "temporal_merge_kernel_size": 4, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
}


class CheckpointMediaProcessor:
    """Stand-in for the checkpoint's remote-code media processor (only its config matters)."""

    media_proc_cfg = MEDIA_CFG

    def media_tokens_calculator(self, media):
        raise AssertionError("the fused processor should answer token counts")

    def preprocess(self, medias, return_tensors=None):
        raise AssertionError("the fused processor should produce the pixels")


class HFProcessor:
    """Stand-in for the checkpoint's HF processor: pixels come from its media processor."""

    def __init__(self):
        self.media_processor = CheckpointMediaProcessor()
        self.image_processor = object()
        self.tokenizer = lambda text, return_tensors=None: {
            "input_ids": torch.tensor([[len(t) for t in text]])
        }

    def __call__(self, text=None, medias=None, **kwargs):
        out = dict(self.tokenizer(text))
        out.update(self.media_processor.preprocess(medias, return_tensors="pt"))
        return out


def make_wrapper():
    import inspect

    import sglang.srt.multimodal.processors.kimi_k25 as proc

    kwargs = dict(
        image_token="<|media_pad|>", image_token_id=163605, patch_size=14, merge_kernel_size=2,
        in_patch_limit=16384, patch_limit_on_one_side=512, fixed_output_tokens=None,
        image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    params = inspect.signature(proc.KimiGPUProcessorWrapper.__init__).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in params}
    return proc.KimiGPUProcessorWrapper(HFProcessor(), **kwargs)


def test_cpu_path_uses_fused_processor(engine):
    import sglang.srt.multimodal.processors.kimi_k25 as proc

    if not hasattr(proc, "KimiGPUProcessorWrapper"):
        pytest.skip("no Kimi CPU preprocessing path in this release")
    original_init = proc.KimiGPUProcessorWrapper.__init__
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    try:
        wrapper = make_wrapper()
        if results["sglang-kimi-k25-fused-cpu-processor"] != "applied":
            assert not isinstance(wrapper.media_processor, FusedKimiProcessor)
            return
        assert isinstance(wrapper.media_processor, FusedKimiProcessor)
        rng = np.random.default_rng(0)
        image = Image.fromarray(rng.integers(0, 256, (61, 90, 3), dtype=np.uint8))
        out = wrapper._cpu_call("a<|media_pad|>b", [image])
        want = FusedKimiProcessor(MEDIA_CFG).preprocess([{"type": "image", "image": image}])
        assert torch.equal(out["pixel_values"], want["pixel_values"])
        assert torch.equal(out["image_grid_thw"], want["grid_thws"])
    finally:
        REGISTRY.revert(engine="sglang")
    assert proc.KimiGPUProcessorWrapper.__init__ is original_init
    assert not isinstance(make_wrapper().media_processor, FusedKimiProcessor)
