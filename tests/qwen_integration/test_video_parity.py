"""torch.equal against the installed transformers Qwen-VL video processors themselves.

``Qwen2VLVideoProcessor`` (Qwen2-VL, Qwen2.5-VL) and ``Qwen3VLVideoProcessor`` (patch 16, its
own sizing), fed the frame forms the engines pass (uint8 numpy or torch, THWC or TCHW, lists
of frames, with metadata), frame sampling on and off, the size kwargs, the per-frame cap, and
float32 and uint8 output; hypothesis over frame counts and sizes; a clip really encoded and
decoded with OpenCV. Each check also asserts that our kernel ran (``KernelCalls``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_fastpath.qwen_integration.video_sizing import (
    QWEN3,
    installed_rule,
    qwen3_legacy_frame_size,
)

from .video_helpers import (
    QWEN3_VL_VIDEO_CONFIG,
    UINT8,
    KernelCalls,
    decoded_clip,
    mjpeg_clip,
    photo_clip,
    rand_clip,
    run_both_videos,
    smooth_clip,
    video_classes,
)
from .video_helpers import video_pairs as _video_pairs

MODELS = ("qwen2.5-vl", "qwen3-vl")

# This file exercises today's video rules (Qwen3-VL scales tiny frames up, rounds the temporal
# length to nearest; 5.19 adds the per-frame cap). Under 5.6-5.14 (the legacy rule, probed)
# transformers refuses or ignores much of it: tests/transformers_matrix/test_video_exact.py is
# the parity check there (the H200 run's transformers 5.12.1 failed six tests here on that).
pytestmark = pytest.mark.skipif(
    installed_rule(QWEN3) is qwen3_legacy_frame_size,
    reason="transformers' legacy Qwen3-VL video rule (5.6-5.14): see test_video_exact.py",
)


@pytest.fixture(scope="module")
def pairs():  # noqa: ANN201
    return _video_pairs()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> KernelCalls:
    return KernelCalls(monkeypatch)


@pytest.fixture(params=MODELS)
def pair(request, pairs):  # noqa: ANN001, ANN201
    return pairs[request.param]


NO_SAMPLING = {"do_sample_frames": False}


@pytest.mark.parametrize("dtype_kwargs", [{}, UINT8], ids=["float32", "uint8"])
@pytest.mark.parametrize("frames", [2, 3, 4, 7])
def test_frame_forms(pair, calls, frames, dtype_kwargs):  # noqa: ANN001
    hf, fast = pair
    clip = smooth_clip(frames, frames, 97, 131)
    forms = {
        "numpy THWC": clip,
        "torch THWC": torch.from_numpy(clip),
        "torch TCHW": torch.from_numpy(clip).permute(0, 3, 1, 2).contiguous(),
        "numpy TCHW": np.ascontiguousarray(clip.transpose(0, 3, 1, 2)),
        "list of frames": list(clip),
        "vLLM's [[video]]": [[clip]],
        "strided THWC view": np.ascontiguousarray(np.pad(clip, ((0, 0), (0, 0), (3, 2), (0, 0))))[
            :, :, 3:-2],
    }
    for name, video in forms.items():
        try:
            run_both_videos(hf, fast, video, calls=calls, **NO_SAMPLING, **dtype_kwargs)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


def test_one_frame(pairs, calls):  # noqa: ANN001
    hf, fast = pairs["qwen2.5-vl"]  # Qwen3-VL refuses fewer than 2 frames (test_video_errors)
    run_both_videos(hf, fast, rand_clip(1, 1, 64, 96), calls=calls, **NO_SAMPLING)
    run_both_videos(hf, fast, rand_clip(1, 1, 64, 96), calls=calls, **NO_SAMPLING, **UINT8)


def test_many_videos_of_different_sizes_and_lengths(pair, calls):  # noqa: ANN001
    hf, fast = pair
    videos = [rand_clip(1, 5, 64, 96), smooth_clip(2, 2, 300, 200), rand_clip(3, 5, 64, 96),
              rand_clip(4, 4, 64, 96), smooth_clip(5, 9, 33, 257)]
    run_both_videos(hf, fast, videos, calls=calls, **NO_SAMPLING)
    run_both_videos(hf, fast, videos, calls=calls, **NO_SAMPLING, **UINT8)


def test_many_frames_and_4k(pair, calls):  # noqa: ANN001
    hf, fast = pair
    run_both_videos(hf, fast, smooth_clip(7, 65, 48, 64), calls=calls, **NO_SAMPLING)
    run_both_videos(hf, fast, rand_clip(8, 64, 30, 44), calls=calls, **NO_SAMPLING, **UINT8)
    run_both_videos(hf, fast, smooth_clip(9, 3, 2160, 3840), calls=calls, **NO_SAMPLING)


def test_unchanged_size_and_no_resize(pair, calls):  # noqa: ANN001
    hf, fast = pair
    factor = hf.patch_size * hf.merge_size
    clip = rand_clip(10, 3, 4 * factor, 6 * factor)
    size = {"shortest_edge": 16 * factor * factor, "longest_edge": 40 * factor * factor}
    if hf.patch_size == 16:  # Qwen3-VL's limits count every frame
        size = {key: value * 3 for key, value in size.items()}
    run_both_videos(hf, fast, clip, calls=calls, size=size, **NO_SAMPLING)  # a multiple already
    run_both_videos(hf, fast, clip, calls=calls, do_resize=False, **NO_SAMPLING)
    run_both_videos(hf, fast, np.ascontiguousarray(clip.transpose(0, 3, 1, 2)), calls=calls,
                    do_resize=False, **NO_SAMPLING, **UINT8)
    # not a multiple: transformers' own path answers (and fails as it does)
    odd = rand_clip(11, 2, 4 * factor + 1, 6 * factor)
    with pytest.raises(Exception) as want:
        hf(odd, do_resize=False, **NO_SAMPLING)
    with pytest.raises(type(want.value)):
        fast(odd, do_resize=False, **NO_SAMPLING)


def test_size_kwargs(pairs, calls):  # noqa: ANN001
    hf, fast = pairs["qwen2.5-vl"]
    clip = smooth_clip(12, 5, 360, 640)
    run_both_videos(hf, fast, clip, calls=calls, min_pixels=128 * 28 * 28,
                    max_pixels=256 * 28 * 28, **NO_SAMPLING)
    run_both_videos(hf, fast, clip, calls=calls, max_pixels=64 * 28 * 28, **NO_SAMPLING)
    run_both_videos(hf, fast, clip, calls=calls, min_pixels=1024 * 28 * 28, **NO_SAMPLING)
    run_both_videos(hf, fast, clip, calls=calls,
                    size={"shortest_edge": 3136, "longest_edge": 100 * 28 * 28}, **NO_SAMPLING)
    hf3, fast3 = pairs["qwen3-vl"]
    for size in ({"shortest_edge": 4096, "longest_edge": 5 * 300 * 32 * 32},
                 {"shortest_edge": 5 * 2000 * 32 * 32, "longest_edge": 25165824}):
        run_both_videos(hf3, fast3, clip, calls=calls, size=size, **NO_SAMPLING)


@pytest.mark.parametrize("cap", [True, False])
def test_cap_pixels_per_frame(pair, calls, cap):  # noqa: ANN001
    hf, fast = pair
    for frames in (2, 9, 40):
        clip = smooth_clip(frames, frames, 480, 854)
        run_both_videos(hf, fast, clip, calls=calls, cap_pixels_per_frame=cap, **NO_SAMPLING)
        run_both_videos(hf, fast, clip, calls=calls, cap_pixels_per_frame=cap,
                        max_video_tokens=64, **NO_SAMPLING)


def test_cap_binding_between_floor_and_limit(calls):  # noqa: ANN001
    """A processor whose ``max_video_tokens`` makes the cap, not its floor or ``size``, decide
    (transformers 5.19-5.24 read it from the processor only)."""
    from vlm_fastpath.qwen_integration.video_processor import fast_video_processor

    qwen2, qwen3 = video_classes()
    for hf in (qwen2(max_video_tokens=5000, cap_pixels_per_frame=True),
               qwen3(max_video_tokens=300, cap_pixels_per_frame=True, **QWEN3_VL_VIDEO_CONFIG),
               # the budget's even share per frame decides
               qwen3(cap_pixels_per_frame=True,
                     **dict(QWEN3_VL_VIDEO_CONFIG,
                            size={"shortest_edge": 4096, "longest_edge": 2_400_000}))):
        fast = fast_video_processor(hf)
        for frames in (6, 40):
            run_both_videos(hf, fast, smooth_clip(frames, frames, 480, 854), calls=calls,
                            **NO_SAMPLING)


def test_qwen3_sizing_equals_transformers_exhaustively():
    """Every frame size up to 80x80 (tiny frames are scaled up first, by truncation) and the
    aspect-ratio and frame-count refusals, against transformers' own Qwen3-VL rule."""
    video_classes()
    from transformers.models.qwen3_vl import video_processing_qwen3_vl as ref

    from vlm_fastpath.qwen_integration.video_sizing import qwen3_frame_size

    for frames in (1, 2, 3, 8):
        for height in range(1, 81):
            for width in range(1, 81):
                try:
                    want = ref.smart_resize(frames, height, width, temporal_factor=2, factor=32,
                                            min_pixels=4096, max_pixels=frames * 2000)
                except ValueError:
                    with pytest.raises(ValueError):
                        qwen3_frame_size(frames, height, width, factor=32, temporal_factor=2,
                                         min_pixels=4096, max_pixels=frames * 2000,
                                         capped=False, max_video_tokens=768)
                    continue
                got = qwen3_frame_size(frames, height, width, factor=32, temporal_factor=2,
                                       min_pixels=4096, max_pixels=frames * 2000, capped=False,
                                       max_video_tokens=768)
                assert got == want, (frames, height, width)


def test_sampling_and_metadata(pair, calls):  # noqa: ANN001
    from transformers.video_utils import VideoMetadata

    hf, fast = pair
    clip = smooth_clip(13, 30, 120, 160)
    meta = {"total_num_frames": 30, "fps": 10.0, "duration": 3.0,
            "frames_indices": list(range(30))}
    for kwargs in ({"do_sample_frames": True, "fps": 2},
                   {"do_sample_frames": True, "fps": 4, "return_metadata": True},
                   {"do_sample_frames": True, "num_frames": 8, "fps": None},
                   {"do_sample_frames": False, "return_metadata": True}):
        run_both_videos(hf, fast, clip, calls=calls, video_metadata=meta, **kwargs)
        run_both_videos(hf, fast, [clip], calls=calls, video_metadata=[VideoMetadata(**meta)],
                        **kwargs)
    if hf.patch_size == 16:  # Qwen3-VL samples by default, without metadata too
        run_both_videos(hf, fast, clip, calls=calls)


def test_decoded_clip_of_photographs(pair, calls, tmp_path):  # noqa: ANN001
    hf, fast = pair
    clip = decoded_clip(tmp_path, photo_clip(11, 240, 320))
    meta = {"total_num_frames": 11, "fps": 10.0, "duration": 1.1,
            "frames_indices": list(range(11))}
    run_both_videos(hf, fast, clip, calls=calls, **NO_SAMPLING)
    run_both_videos(hf, fast, clip, calls=calls, **NO_SAMPLING, **UINT8)
    run_both_videos(hf, fast, clip, calls=calls, video_metadata=meta, do_sample_frames=True,
                    fps=5)


def test_motion_jpeg_clip_of_photographs(pair, calls):  # noqa: ANN001
    hf, fast = pair
    clip = mjpeg_clip(photo_clip(9, 360, 480), quality=70)
    run_both_videos(hf, fast, clip, calls=calls, **NO_SAMPLING)
    run_both_videos(hf, fast, list(clip), calls=calls, **NO_SAMPLING, **UINT8)


_SIZES = st.one_of(
    st.tuples(st.integers(1, 40), st.integers(1, 40)),  # tiny
    st.tuples(st.integers(41, 700), st.integers(41, 700)),  # odd, any
    st.tuples(st.integers(2, 6), st.integers(300, 1100)),  # extreme aspect ratio (wide)
    st.tuples(st.integers(300, 1100), st.integers(2, 6)),  # extreme aspect ratio (tall)
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    frames=st.sampled_from([1, 2, 3, 5, 8, 13, 64, 67]),
    size=_SIZES,
    uint8=st.booleans(),
    cap=st.sampled_from([None, True, False]),
    pixels=st.sampled_from([None, (56 * 56, 28 * 28 * 64), (28 * 28 * 200, 28 * 28 * 1000)]),
    layout=st.sampled_from(["THWC", "TCHW"]),
    seed=st.integers(0, 2**16),
)
def test_hypothesis(pairs, calls, model, frames, size, uint8, cap, pixels, layout, seed):  # noqa: ANN001, PLR0913
    hf, fast = pairs[model]
    height, width = size
    if model == "qwen3-vl" and frames < 2:
        frames = 2
    if frames >= 64:  # keep the slow reference quick
        height, width = min(height, 64), min(width, 64)
    clip = rand_clip(seed, frames, height, width)
    video = clip if layout == "THWC" else torch.from_numpy(clip).permute(0, 3, 1, 2)
    kwargs = dict(NO_SAMPLING, **(UINT8 if uint8 else {}))
    if cap is not None:
        kwargs["cap_pixels_per_frame"] = cap
    if pixels is not None:
        scale = frames if model == "qwen3-vl" else 1
        kwargs["size"] = {"shortest_edge": pixels[0] * scale, "longest_edge": pixels[1] * scale}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = hf(video, return_tensors="pt", **kwargs)
    except ValueError as exc:  # aspect ratio above 200: both refuse with a ValueError
        with pytest.raises(ValueError):
            fast(video, return_tensors="pt", **kwargs)
        assert "aspect ratio" in str(exc)
        return
    del expected
    # a THWC clip of 1 or 3 rows reads as TCHW to transformers' layout inference (and so to
    # ours): 1 row is 1 "channel", left to transformers' own path; 3 rows run ours as TCHW
    ambiguous = layout == "THWC" and height in (1, 3)
    run_both_videos(hf, fast, video, calls=calls, fast_path=not (ambiguous and height == 1),
                    **kwargs)

