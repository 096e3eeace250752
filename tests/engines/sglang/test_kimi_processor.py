"""Kimi K2.5 CPU preprocessing path: the wrapper's media processor becomes FusedKimiProcessor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.reference_kimi import ref_preprocess
from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.patches import REGISTRY

MEDIA_CFG = {
    "patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
    "in_patch_limit_each_frame": 4096, "in_patch_limit_video": None,
    "temporal_merge_kernel_size": 4, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
}


class CheckpointMediaProcessor:
    """Stand-in for the checkpoint's remote-code media processor: its arithmetic
    (``ref_preprocess``), counting calls; once ours replaced it, it must not be called."""

    media_proc_cfg = MEDIA_CFG
    calls = 0

    def media_tokens_calculator(self, media):
        type(self).calls += 1
        return ref_preprocess([media], MEDIA_CFG)[2][0]

    def preprocess(self, medias, return_tensors=None):
        type(self).calls += 1
        pixels, grids, _ = ref_preprocess(medias, MEDIA_CFG)
        return {"pixel_values": pixels, "grid_thws": grids}


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
        CheckpointMediaProcessor.calls = 0
        out = wrapper._cpu_call("a<|media_pad|>b", [image])
        assert CheckpointMediaProcessor.calls == 0  # ours answered pixels and token counts
        want = FusedKimiProcessor(MEDIA_CFG).preprocess([{"type": "image", "image": image}])
        assert torch.equal(out["pixel_values"], want["pixel_values"])
        assert torch.equal(out["image_grid_thw"], want["grid_thws"])
    finally:
        REGISTRY.revert(engine="sglang")
    assert proc.KimiGPUProcessorWrapper.__init__ is original_init
    assert not isinstance(make_wrapper().media_processor, FusedKimiProcessor)


class ShiftedCheckpointProcessor(CheckpointMediaProcessor):
    """A checkpoint whose arithmetic differs from ours (its pixels moved by one)."""

    def preprocess(self, medias, return_tensors=None):
        out = super().preprocess(medias, return_tensors)
        return {**out, "pixel_values": out["pixel_values"] + 1}


def test_checkpoint_processor_behaving_differently_is_kept(engine, monkeypatch):
    """The behaviour clause, per processor: ours replaces the checkpoint's only where equal."""
    import sglang.srt.multimodal.processors.kimi_k25 as proc

    from vlm_fastpath.patches.adapters import kimi_probe

    if not hasattr(proc, "KimiGPUProcessorWrapper"):
        pytest.skip("no Kimi CPU preprocessing path in this release")
    monkeypatch.setattr(kimi_probe, "_VERDICTS", {})
    REGISTRY.revert(engine="sglang")
    results = {r.name: r for r in REGISTRY.apply(engine="sglang")}
    try:
        if results["sglang-kimi-k25-fused-cpu-processor"].status.value != "applied":
            pytest.skip("the patch does not apply to this release")
        monkeypatch.setattr(HFProcessor, "__init__", _shifted_init)
        wrapper = make_wrapper()
        assert isinstance(wrapper.media_processor, ShiftedCheckpointProcessor)
        reason = next(r.reason for r in REGISTRY.status("sglang")
                      if r.name == "sglang-kimi-k25-fused-cpu-processor")
        assert "keeps the engine's processor: behaviour:" in reason, reason
        monkeypatch.undo()
        assert isinstance(make_wrapper().media_processor, FusedKimiProcessor)  # equal: ours
    finally:
        REGISTRY.revert(engine="sglang")


def _shifted_init(self):
    self.media_processor = ShiftedCheckpointProcessor()
    self.image_processor = object()
    self.tokenizer = lambda text, return_tensors=None: {
        "input_ids": torch.tensor([[len(t) for t in text]])
    }
