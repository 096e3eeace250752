"""SGLang's Qwen-VL multimodal processor uses our video processor on its CPU path, same outputs.

SGLang's own ``QwenVLImageProcessor`` for a local tiny Qwen2.5-VL (and Qwen3-VL) checkpoint;
a video request goes through the release's own ``preprocess_video`` (frame sampling, its
torchvision bilinear resize, left alone by us) and ``process_mm_data`` (the HF processor
call), with the plugin and without it (after ``revert``) in the same process.
"""

from __future__ import annotations

import asyncio
import importlib

import numpy as np
import pytest
import torch
from packaging.version import Version

from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.adapters import qwen_video_twin as video_adapter

from .test_qwen_processor import _build, checkpoints, cpu_path  # noqa: F401 - fixtures

sglang = pytest.importorskip("sglang")
if Version(Version(sglang.__version__).public) < Version("0.5.12"):
    pytest.skip("sglang-qwen-vl-cpu-video-processor applies from SGLang 0.5.23 (its status "
                "below: conftest.EXPECTED)", allow_module_level=True)

PATCH = "sglang-qwen-vl-cpu-video-processor"
QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl"
PROMPT_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


class _Decoder:
    """The frame source ``preprocess_video`` reads (SGLang's ``VideoDecoderWrapper``
    interface: ``len``, ``avg_fps``, ``get_frames_as_tensor``), over decoded frames."""

    def __init__(self, frames: np.ndarray, fps: float) -> None:
        self.frames = torch.from_numpy(frames)
        self.avg_fps = fps

    def __len__(self) -> int:
        return len(self.frames)

    def get_frames_as_tensor(self, indices: list[int]) -> torch.Tensor:
        return self.frames[indices]


def _clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (frames, -(-height // 8), -(-width // 8), 3))
    big = np.repeat(np.repeat(small, 8, axis=1), 8, axis=2)[:, :height, :width]
    return np.clip(big + rng.integers(0, 32, big.shape), 0, 255).astype(np.uint8)


def _preprocessed(proc_mod, clip: np.ndarray, fps: float = 4.0):
    """The release's own ``preprocess_video`` on ``clip`` (its sampling and resize)."""
    return asyncio.run(proc_mod.preprocess_video(_Decoder(clip, fps), video_config={}))


def _run(mm, videos, metadata, qwen3: bool) -> dict[str, torch.Tensor]:
    text = "Describe " + " and ".join([PROMPT_VIDEO] * len(videos)) + "."
    kwargs = {"video_metadata": metadata, "do_sample_frames": False} if qwen3 else {}
    out = mm.process_mm_data(input_text=text, videos=videos, **kwargs)
    return {k: out[k] for k in ("input_ids", "pixel_values_videos", "video_grid_thw")}


def _status() -> dict[str, str]:
    return {r.name: r.status.value for r in REGISTRY.status("sglang")}


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_video_request_uses_ours_with_equal_outputs(engine, checkpoints, cpu_path, name,  # noqa: F811
                                                     monkeypatch):
    if name not in checkpoints:
        pytest.skip("transformers has no Qwen3-VL")
    proc_mod = importlib.import_module(QWEN_VL)
    # our decoder stands in for SGLang's (its ``isinstance`` test in preprocess_video)
    monkeypatch.setattr(proc_mod, "VideoDecoderWrapper", _Decoder)
    monkeypatch.setattr(proc_mod, "is_cpu", lambda: True, raising=False)  # no pinned memory
    if not torch.cuda.is_available():
        # releases before 0.5.23 pin the resized frames unconditionally, which needs a CUDA
        # driver; on this CPU-only host pinning is the identity (the pixels are unchanged)
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)
    pre = [_preprocessed(proc_mod, _clip(1, 12, 240, 320)),
           _preprocessed(proc_mod, _clip(2, 9, 97, 131))]
    videos = [video for video, _ in pre]
    metadata = [meta for _, meta in pre]
    video_adapter.forget_views()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        assert _status()[PATCH] == "applied"
        mm, hf_processor = _build(checkpoints[name])
        twin = mm._processor.video_processor
        assert video_adapter.is_twin(twin), type(twin)
        assert not video_adapter.is_twin(hf_processor.video_processor)
        calls = []
        parent = type(twin).__mro__[1]
        original = parent.preprocess

        def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            calls.append(kwargs.get("device"))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(parent, "preprocess", spy)
        from vlm_fastpath.qwen_integration import video_processor

        kernel_runs = []
        fill = video_processor.fill_videos
        monkeypatch.setattr(video_processor, "fill_videos",
                            lambda *a, **k: kernel_runs.append(1) or fill(*a, **k))
        with_plugin = _run(mm, videos, metadata, name == "qwen3")
        assert calls, "SGLang did not call our video processor"
        assert kernel_runs, "our video processor left the frames to transformers' own path"
        REGISTRY.revert(engine="sglang")
        without = _run(mm, videos, metadata, name == "qwen3")
        fresh, _ = _build(checkpoints[name])
        assert not video_adapter.is_twin(fresh._processor.video_processor)
        for key, want in without.items():
            got = with_plugin[key]
            assert got.dtype == want.dtype and torch.equal(got, want), key
        assert torch.equal(_run(fresh, videos, metadata, name == "qwen3")["pixel_values_videos"],
                           without["pixel_values_videos"])
    finally:
        REGISTRY.revert(engine="sglang")
        video_adapter.forget_views()


def test_gpu_video_calls_stay_transformers(engine, checkpoints, cpu_path, monkeypatch):  # noqa: F811
    video_adapter.forget_views()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, _ = _build(checkpoints["qwen2.5"])
        twin = mm._processor.video_processor
        seen = []
        # the engine's own answer, spied on: the twin hands the calls it does not serve to the
        # original it holds (a replacement on the object itself would replace the twin's own
        # method too: they share the object's attributes)
        engine_side = type("Engine", (), {"preprocess": lambda self, videos, **kw:
                                          seen.append(kw) or "hf"})()
        monkeypatch.setattr(twin, "_vlm_original", engine_side)
        clip = _clip(3, 2, 64, 64)
        assert twin(clip, device="cuda:0") == "hf"
        assert seen and seen[0]["device"] == "cuda:0"
        out = twin(clip, device="cpu", return_tensors="pt", do_sample_frames=False)
        assert len(seen) == 1 and out["video_grid_thw"].tolist() == [[1, 4, 4]]
        REGISTRY.revert(engine="sglang")  # a view built before the revert: transformers' code
        assert twin(clip) == "hf"
        assert len(seen) == 2
    finally:
        REGISTRY.revert(engine="sglang")
        video_adapter.forget_views()
