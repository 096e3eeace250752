"""Property tests: random sizes (extreme aspect ratios too) and random configs vs the oracle."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import assert_parity, img, rand_array, video

MAX_PIXELS = 400_000  # keeps one example at a few tens of ms on 2 cores
MAX_SIDE = 3000

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@st.composite
def sizes(draw):
    kind = draw(st.sampled_from(["any", "wide", "tall", "tiny", "near-patch"]))
    if kind == "wide":
        width, height = draw(st.integers(500, MAX_SIDE)), draw(st.integers(1, 12))
    elif kind == "tall":
        width, height = draw(st.integers(1, 12)), draw(st.integers(500, MAX_SIDE))
    elif kind == "tiny":
        width, height = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    elif kind == "near-patch":  # multiples of a patch size, +-1
        width = draw(st.sampled_from([7, 14, 16])) * draw(st.integers(1, 60))
        height = draw(st.sampled_from([7, 14, 16])) * draw(st.integers(1, 60))
        width = max(1, width + draw(st.integers(-1, 1)))
        height = max(1, height + draw(st.integers(-1, 1)))
    else:
        width, height = draw(st.integers(1, MAX_SIDE)), draw(st.integers(1, MAX_SIDE))
    if width * height > MAX_PIXELS:  # cap the cost, keep the long side
        if width >= height:
            height = max(1, MAX_PIXELS // width)
        else:
            width = max(1, MAX_PIXELS // height)
    return width, height


@st.composite
def configs(draw):
    merge = draw(st.integers(1, 3))
    unit = st.floats(0.0, 1.0, allow_nan=False, width=64)
    std = st.floats(0.01, 2.0, allow_nan=False, width=64)
    return {
        "patch_size": draw(st.sampled_from([7, 14, 16])),
        "merge_kernel_size": draw(st.sampled_from([merge, [merge, merge]])),
        "in_patch_limit": draw(st.one_of(st.integers(1, 64), st.integers(64, 20000))),
        "patch_limit_on_one_side": draw(st.one_of(st.integers(1, 8), st.integers(8, 600))),
        "fixed_output_tokens": draw(st.one_of(st.none(), st.none(), st.integers(1, 5000))),
        "in_patch_limit_each_frame": draw(st.one_of(st.none(), st.integers(1, 5000))),
        "in_patch_limit_video": draw(st.one_of(st.none(), st.integers(1, 9000))),
        "temporal_merge_kernel_size": 4,
        "image_mean": draw(st.lists(unit, min_size=3, max_size=3)),
        "image_std": draw(st.lists(std, min_size=3, max_size=3)),
    }


def _image(seed: int, width: int, height: int, mode: str) -> Image.Image:
    channels = {"RGB": 3, "RGBA": 4, "L": 0}[mode]
    return Image.fromarray(rand_array(seed, width, height, channels))


@SETTINGS
@given(
    size=sizes(),
    cfg=configs(),
    mode=st.sampled_from(["RGB", "RGB", "RGBA", "L"]),
    uint8=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_image_and_config(size, cfg, mode, uint8, seed):
    image = _image(seed, *size, mode)
    assert_parity(FusedKimiProcessor(cfg), [img(image)], cfg, uint8=uint8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=configs(),
    frame_size=sizes(),
    num_frames=st.integers(1, 4),
    extra=sizes(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_video_batch(cfg, frame_size, num_frames, extra, seed):
    limit_video = cfg["in_patch_limit_video"]
    per_frame = cfg["in_patch_limit_each_frame"] or cfg["in_patch_limit"]
    if limit_video is not None and min(round(limit_video / num_frames), per_frame) <= 0:
        cfg = dict(cfg, in_patch_limit_video=None)  # no patches left: covered elsewhere
    # frames capped smaller than images: a chunk has up to 4 of them
    width, height = frame_size
    scale = min(1.0, (MAX_PIXELS / 4 / (width * height)) ** 0.5)
    width, height = max(1, int(width * scale)), max(1, int(height * scale))
    frames = [_image(seed + i, width, height, "RGB") for i in range(num_frames)]
    medias = [img(_image(seed ^ 0x5A5A, *extra, "RGB")), video(frames)]
    assert_parity(FusedKimiProcessor(cfg), medias, cfg)
