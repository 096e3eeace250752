"""Bad video input: a clear ValueError of ours where transformers raises a ValueError (or, for a
video of no frames, silently returns nothing), transformers' own answer where it accepts an
input we leave to it, and twins refused for processors whose arithmetic is not the one we
reproduce."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.imaging.errors import ImagingInputError, PixelLimitError
from vlm_fastpath.qwen_integration.errors import QwenConfigError, QwenInputError

from .video_helpers import KernelCalls, rand_clip, run_both_videos, video_classes
from .video_helpers import video_pairs as _video_pairs

NO_SAMPLING = {"do_sample_frames": False}


@pytest.fixture(scope="module")
def pairs():  # noqa: ANN201
    return _video_pairs()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> KernelCalls:
    return KernelCalls(monkeypatch)


def _errors():  # noqa: ANN202
    from vlm_fastpath.qwen_integration.errors import (
        QwenVideoInputError,
        QwenVideoTooLargeError,
    )

    return QwenVideoInputError, QwenVideoTooLargeError


@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-vl"])
def test_zero_frames(pairs, model):  # noqa: ANN001
    video_error, _ = _errors()
    hf, fast = pairs[model]
    empty = np.zeros((0, 64, 64, 3), np.uint8)
    for video in (empty, torch.from_numpy(empty)):
        with pytest.raises(video_error, match="at least one frame") as info:
            fast(video, **NO_SAMPLING)
        assert isinstance(info.value, (ValueError, QwenInputError, ImagingInputError))
    if model == "qwen2.5-vl":  # transformers returns a grid of 0 frames and no patches
        out = hf(empty, **NO_SAMPLING)
        assert out["pixel_values_videos"].shape[0] == 0


@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-vl"])
def test_mismatched_frames(pairs, model):  # noqa: ANN001
    video_error, _ = _errors()
    hf, fast = pairs[model]
    frames = [rand_clip(1, 1, 64, 64)[0], rand_clip(2, 1, 60, 64)[0]]
    with pytest.raises(ValueError):
        hf(frames, **NO_SAMPLING)
    with pytest.raises(video_error, match=r"share one size.*\(60, 64, 3\).*\(64, 64, 3\)"):
        fast(frames, **NO_SAMPLING)
    with pytest.raises(video_error, match="share one size"):
        fast([frames], **NO_SAMPLING)


@pytest.mark.parametrize("channels", [2, 4, 5])
def test_channel_counts_transformers_refuses(pairs, channels):  # noqa: ANN001
    hf, fast = pairs["qwen2.5-vl"]
    clip = np.zeros((2, 64, 64, channels), np.uint8)
    with pytest.raises(ValueError) as want:
        hf(clip, **NO_SAMPLING)
    with pytest.raises(ValueError) as got:
        fast(clip, **NO_SAMPLING)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize(
    "video",
    [
        np.random.default_rng(0).random((3, 40, 50, 3)).astype(np.float32),  # float frames
        np.random.default_rng(1).integers(0, 256, (3, 40, 50, 3)).astype(np.int16),
        np.random.default_rng(2).integers(0, 256, (3, 40, 50, 1)).astype(np.uint8),  # gray
        np.random.default_rng(3).integers(0, 256, (3, 1, 40, 50)).astype(np.uint8),
    ],
    ids=["float32", "int16", "gray THWC", "gray TCHW"],
)
def test_inputs_left_to_transformers(pairs, calls, video):  # noqa: ANN001
    for hf, fast in pairs.values():
        run_both_videos(hf, fast, video, calls=calls, fast_path=False, **NO_SAMPLING)


def test_too_few_frames_for_qwen3(pairs):  # noqa: ANN001
    video_error, _ = _errors()
    hf, fast = pairs["qwen3-vl"]
    clip = rand_clip(3, 1, 64, 64)
    with pytest.raises(ValueError, match="temporal_factor"):
        hf(clip, **NO_SAMPLING)
    with pytest.raises(video_error, match="at least 2 frames"):
        fast(clip, **NO_SAMPLING)


def test_aspect_ratio(pairs):  # noqa: ANN001
    for hf, fast in pairs.values():
        clip = rand_clip(4, 2, 2, 500)
        with pytest.raises(ValueError, match="aspect ratio"):
            hf(clip, **NO_SAMPLING)
        with pytest.raises(QwenInputError, match="aspect ratio"):
            fast(clip, **NO_SAMPLING)


def test_frame_over_the_pixel_limit(pairs, monkeypatch):  # noqa: ANN001
    _, too_large = _errors()
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    for _, fast in pairs.values():
        with pytest.raises(too_large, match=r"50x45 = 2250 pixels exceed the limit of 2000"):
            fast(rand_clip(5, 2, 45, 50), **NO_SAMPLING)
        with pytest.raises(PixelLimitError):
            fast(rand_clip(5, 2, 45, 50), **NO_SAMPLING)
        fast(rand_clip(5, 2, 40, 50), **NO_SAMPLING)  # 2000: at the limit, fine


def test_too_many_frames(pairs, monkeypatch):  # noqa: ANN001
    _, too_large = _errors()
    from vlm_fastpath.qwen_integration import video_processor

    monkeypatch.setattr(video_processor, "MAX_FRAMES", 6)
    for _, fast in pairs.values():
        with pytest.raises(too_large, match="7 frames exceeds 6"):
            fast(rand_clip(6, 7, 30, 30), **NO_SAMPLING)
        fast(rand_clip(6, 6, 30, 30), **NO_SAMPLING)


def test_twin_refused_for_other_arithmetic():
    qwen2, qwen3 = video_classes()
    from vlm_fastpath.qwen_integration.video_processor import (
        FastQwen2VLVideoProcessor,
        fast_video_processor,
    )

    class Custom(qwen2):
        def resize(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
            return super().resize(*args, **kwargs)

    with pytest.raises(QwenConfigError, match="overrides resize"):
        fast_video_processor(Custom())
    with pytest.raises(QwenConfigError, match="mirrors a Qwen2VLVideoProcessor"):
        FastQwen2VLVideoProcessor.from_hf(qwen3())
    with pytest.raises(QwenConfigError, match="no fast twin"):
        fast_video_processor(object())


def test_a_step_this_transformers_lacks_is_no_fault(monkeypatch):
    """transformers before 5.19 has no ``patchify`` method (the step is inline in
    ``_preprocess``): the twin is still made, and the probes, not an AttributeError, decide."""
    qwen2, _ = video_classes()
    from vlm_fastpath.qwen_integration.video_compat import check_video_compatible
    from vlm_fastpath.qwen_integration.video_processor import fast_video_processor

    owner = next(c for c in qwen2.__mro__ if "patchify" in c.__dict__)
    monkeypatch.delattr(owner, "patchify")
    hf = qwen2()
    assert fast_video_processor(hf) is not None
    reason = check_video_compatible(hf)
    assert reason is None or isinstance(reason, str)


def test_probe_cases_skip_kwargs_this_transformers_lacks(monkeypatch):
    """A probe kwarg the installed transformers does not declare (``cap_pixels_per_frame``
    before 5.19) is not a difference: its case is skipped, the rest still compared."""
    qwen2, _ = video_classes()
    from vlm_fastpath.qwen_integration import video_compat

    hf = qwen2()
    known = video_compat._known_kwargs(hf)
    assert known is not None and "cap_pixels_per_frame" in known
    monkeypatch.setattr(video_compat, "_known_kwargs", lambda _: known - {"cap_pixels_per_frame"})
    seen = []
    original = type(hf).__call__
    monkeypatch.setattr(type(hf), "__call__",
                        lambda self, *a, **k: seen.append(k) or original(self, *a, **k))
    assert video_compat.check_video_compatible(hf) is None
    assert seen and all("cap_pixels_per_frame" not in k for k in seen)


def test_twin_keeps_settings_and_serializes_as_the_original(pairs):  # noqa: ANN001
    for hf, fast in pairs.values():
        assert fast.to_dict() == hf.to_dict()
        assert fast.size == hf.size and fast.patch_size == hf.patch_size


def test_without_numba_transformers_answers(pairs, calls, monkeypatch):  # noqa: ANN001
    """No compiled kernel (numba off or missing): transformers' own path, same output."""
    from vlm_fastpath.qwen_integration import video_processor

    monkeypatch.setattr(video_processor, "kernels_available", lambda: False)
    for hf, fast in pairs.values():
        run_both_videos(hf, fast, rand_clip(7, 3, 40, 50), calls=calls, fast_path=False,
                        **NO_SAMPLING)


@pytest.mark.parametrize(("frames", "height", "width"), [(4, 720, 1280), (4, 640, 1160),
                                                         (0, 640, 1152)])
def test_video_kernel_refuses_plans_outside_whole_merge_blocks(frames: int, height: int,
                                                               width: int) -> None:
    """A plan the sizing never makes (a frame not in whole merge blocks, no frames) is a
    ValueError before the kernel runs: its merge-order row index would write past ``out``
    (720 rows of 16-pixel patches, merge 2, crashed the process)."""
    from vlm_fastpath.qwen_integration.video_kernel import VideoPlan, fill_videos

    plan = VideoPlan(frames, height, width, 16, 2, 2)
    clip = np.zeros((max(frames, 1), 720, 1280, 3), np.uint8)
    out = np.empty((plan.num_patches, plan.row_length), np.uint8)
    lut = np.tile(np.arange(256, dtype=np.uint8), (3, 1))
    with pytest.raises(ValueError, match="whole 32-pixel merge blocks"):
        fill_videos([clip], [True], [plan], [out], lut)
