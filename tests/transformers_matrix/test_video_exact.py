"""The Qwen-VL video parity subset under every transformers minor of the matrix (ci/transformers/).

Why: the video processors' sizing changed between minors (5.19 added the per-frame pixel cap;
before it, Qwen3-VL's ``smart_resize`` refused frames under one ``factor`` and rounded the
temporal length up), and SGLang releases before 0.5.23 pin transformers 5.6-5.12. Under each
minor: ``check_video_compatible`` must accept the Qwen2-VL and Qwen3-VL video processors (5.x)
or may stand aside (4.x), and wherever it accepts, our twin equals transformers on odd and
even frame counts, one frame, THWC and TCHW, float32 and uint8, per-call pixel limits, with
our kernel running under 5.x (not transformers' own path answering for us; under 4.x, whose
resize takes ``interpolation``, the twin leaves every clip to transformers); where
transformers refuses a clip, ours refuses it with the same class of error.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from packaging.version import Version

transformers = pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from tests.qwen_integration.video_helpers import (  # noqa: E402
    QWEN3_VL_VIDEO_CONFIG,
    UINT8,
    KernelCalls,
    assert_same_videos,
    smooth_clip,
)
from vlm_fastpath.qwen_integration.video_compat import check_video_compatible  # noqa: E402

MAJOR5 = Version(transformers.__version__).major >= 5


def _processors() -> dict[str, Any]:
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers.models.qwen2_vl.video_processing_qwen2_vl import (
                Qwen2VLVideoProcessor,
            )
            found["qwen2.5-vl"] = Qwen2VLVideoProcessor()
        except ImportError:
            pass
        try:
            from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
                Qwen3VLVideoProcessor,
            )
            found["qwen3-vl"] = Qwen3VLVideoProcessor(**QWEN3_VL_VIDEO_CONFIG)
        except ImportError:
            pass
    return found


PROCESSORS = _processors()
# (frames, height, width): odd, even, one frame, odd sizes, a frame under Qwen3-VL's factor
CLIPS = ((3, 50, 70), (4, 64, 96), (1, 45, 61), (6, 97, 131), (2, 24, 200))
# per-call pixel limits through ``size`` (both classes take it; Qwen3-VL's bound the clip)
LIMITS = ({}, {"size": {"shortest_edge": 32 * 32, "longest_edge": 6 * 48 * 48}},
          {"size": {"shortest_edge": 4 * 128 * 128, "longest_edge": 16 * 256 * 256}})


@pytest.fixture(scope="module", params=list(PROCESSORS))
def pair(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    from vlm_fastpath.qwen_integration.video_processor import fast_video_processor

    hf = PROCESSORS[request.param]
    reason = check_video_compatible(hf)
    if reason is not None:
        if MAJOR5:
            pytest.fail(f"transformers {transformers.__version__}: {reason}")
        pytest.skip(f"stands aside under transformers {transformers.__version__}: {reason}")
    return hf, fast_video_processor(hf)


def _call(processor: Any, video: Any, kwargs: dict[str, Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return processor(video, return_tensors="pt", do_sample_frames=False, **kwargs)


@pytest.mark.parametrize("limits", LIMITS, ids=["defaults", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_clips_equal_with_our_kernel(pair, dtype, limits, monkeypatch):
    hf, fast = pair
    calls = KernelCalls(monkeypatch)
    kwargs = dict(limits, **(UINT8 if dtype == "uint8" else {}))
    compared = 0
    for seed, (frames, height, width) in enumerate(CLIPS):
        clip = smooth_clip(seed, frames, height, width)
        for video in (clip, torch.from_numpy(clip).permute(0, 3, 1, 2)):
            try:
                want = _call(hf, video, kwargs)
            except Exception as exc:  # noqa: BLE001 - then ours must refuse it alike
                with pytest.raises(type(exc)):
                    _call(fast, video, kwargs)
                continue
            before = calls.count
            got = _call(fast, video, kwargs)
            # 4.x (``interpolation``, not ``resample``) leaves every clip to transformers' path
            assert calls.count > before or not MAJOR5, (
                f"{frames}x{width}x{height}: transformers answered")
            assert_same_videos(want, got)
            compared += 1
    assert compared >= 6, "most clips must be compared, not refused"


def test_videos_left_to_transformers_equal(pair):
    """Videos our kernel does not take (4 channels, 1 channel, float pixels) go to this
    release's own ``_prepare_input_videos``, with the arguments its signature has (5.18 added
    ``do_convert_rgb``; before, passing it was a TypeError): equal output, or the same refusal."""
    hf, fast = pair
    rng = np.random.default_rng(0)
    videos = {
        "rgba THWC": rng.integers(0, 256, (2, 40, 56, 4), dtype=np.uint8),
        "gray TCHW": torch.from_numpy(rng.integers(0, 256, (2, 1, 40, 56), dtype=np.uint8)),
        "float THWC": rng.random((2, 40, 56, 3), dtype=np.float32),
    }
    compared: list[str] = []
    for name, video in videos.items():
        try:
            want = _call(hf, video, {})
        except Exception as exc:  # noqa: BLE001 - then ours must refuse it alike
            with pytest.raises(type(exc)):
                _call(fast, video, {})
            continue
        assert_same_videos(want, _call(fast, video, {}))
        compared.append(name)
    assert compared, "transformers refused every video: nothing was compared"
