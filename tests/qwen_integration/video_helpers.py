"""Shared helpers of the Qwen-VL video tests: the transformers video processors themselves, their
fast twins, clips (random, smooth, photographs panned), and the parity check."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

# video_preprocessor_config.json of Qwen3-VL's public checkpoints (the values that decide
# pixels); Qwen2.5-VL's checkpoints have none, so their video processor takes the class defaults
# and the checkpoint's mean/std (the same numbers).
QWEN3_VL_VIDEO_CONFIG: dict[str, Any] = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
UINT8 = {"do_rescale": False, "do_normalize": False}


def video_classes() -> tuple[Any, Any]:
    """(Qwen2VLVideoProcessor, Qwen3VLVideoProcessor), or skip without transformers."""
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    return Qwen2VLVideoProcessor, Qwen3VLVideoProcessor


def video_pairs() -> dict[str, tuple[Any, Any]]:
    """model name -> (transformers video processor, our twin from ``fast_video_processor``)."""
    qwen2, qwen3 = video_classes()
    from vlm_fastpath.qwen_integration.video_processor import fast_video_processor

    hfs = {"qwen2.5-vl": qwen2(), "qwen3-vl": qwen3(**QWEN3_VL_VIDEO_CONFIG)}
    return {name: (hf, fast_video_processor(hf)) for name, hf in hfs.items()}


# -- clips -------------------------------------------------------------------------------------
def rand_clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(frames, height, width, 3), dtype=np.uint8)


def smooth_clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    """Low-frequency frames that drift (like video), so a resize or pairing bug shows."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 16) + frames, max(2, width // 16), 3))
    out = np.empty((frames, height, width, 3), np.uint8)
    for k in range(frames):
        window = small[k:k + max(2, height // 16)].astype(np.uint8)
        out[k] = np.asarray(Image.fromarray(window).resize((width, height), Image.BILINEAR))
    return out


def photo_clip(frames: int, height: int, width: int) -> np.ndarray:
    """A camera pan over real photographs (scikit-image's), one frame per step."""
    data = pytest.importorskip("skimage.data")
    photos = [data.astronaut(), data.coffee(), data.chelsea()]
    strip = np.concatenate(
        [np.asarray(Image.fromarray(p).resize((width, height), Image.BICUBIC)) for p in photos],
        axis=1,
    )
    step = max(1, (strip.shape[1] - width) // max(1, frames - 1))
    return np.stack([strip[:, k * step:k * step + width] for k in range(frames)])


def decoded_clip(tmp_path: Any, clip: np.ndarray, fps: float = 10.0) -> np.ndarray:
    """``clip`` encoded to MPEG-4 with OpenCV and decoded back as RGB (what vLLM's OpenCV
    video loader hands the processor): real codec output, block artefacts and all."""
    cv2 = pytest.importorskip("cv2")
    path = str(tmp_path / "clip.mp4")
    height, width = clip.shape[1:3]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    assert writer.isOpened()
    for frame in clip:
        writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    writer.release()
    capture = cv2.VideoCapture(path)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    assert len(frames) == len(clip)
    return np.stack(frames)


def mjpeg_clip(clip: np.ndarray, quality: int = 80) -> np.ndarray:
    """``clip`` as Motion-JPEG (every frame a JPEG, 4:2:0) decoded back with Pillow: codec
    output without a video library (OpenCV's MPEG-4 round trip is :func:`decoded_clip`)."""
    frames = []
    for frame in clip:
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG", quality=quality)
        frames.append(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))
    return np.stack(frames)


# -- parity ------------------------------------------------------------------------------------
def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))


def assert_same_videos(expected: Any, got: Any) -> None:
    """torch.equal on ``pixel_values_videos`` and ``video_grid_thw`` (dtype and shape first),
    and equal ``video_metadata`` where returned."""
    assert set(expected.keys()) == set(got.keys()), (set(expected.keys()), set(got.keys()))
    for key in ("video_grid_thw", "pixel_values_videos"):
        want, have = _as_tensor(expected[key]), _as_tensor(got[key])
        assert want.dtype == have.dtype, (key, want.dtype, have.dtype)
        assert want.shape == have.shape, (key, tuple(want.shape), tuple(have.shape))
        if not torch.equal(want, have):
            diff = (want.double() - have.double()).abs()
            rows = torch.nonzero(diff.amax(dim=-1) > 0)[:5].flatten().tolist() if diff.ndim else []
            raise AssertionError(
                f"{key} differs in {int((diff > 0).sum())} of {want.numel()} values, "
                f"max abs {diff.max().item()}, first rows {rows}"
            )
    if "video_metadata" in expected:
        assert repr(expected["video_metadata"]) == repr(got["video_metadata"])


class KernelCalls:
    """Counts the video kernel's runs, so a parity test knows our pixels were compared (and
    not transformers' own, which the processor falls back to for inputs it leaves alone)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("torchvision")  # the processor module imports transformers' video
        pytest.importorskip("transformers")  # processors, which need both
        from vlm_fastpath.qwen_integration import video_processor

        self.count = 0
        original = video_processor.fill_videos

        def counting(*args: Any, **kwargs: Any) -> None:
            self.count += 1
            original(*args, **kwargs)

        monkeypatch.setattr(video_processor, "fill_videos", counting)


def run_both_videos(
    hf: Any, fast: Any, videos: Any, *, calls: KernelCalls | None = None, fast_path: bool = True,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Both processors on ``videos``; equal outputs; with ``calls``, our kernel ran (or, with
    ``fast_path=False``, did not: transformers' own path answered)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = hf(videos, return_tensors="pt", **kwargs)
        before = calls.count if calls is not None else 0
        got = fast(videos, return_tensors="pt", **kwargs)
    if calls is not None:
        assert (calls.count > before) == fast_path, "the fast path ran" if not fast_path else (
            "the fast path did not run: transformers' own path answered")
    assert_same_videos(expected, got)
    return expected, got
