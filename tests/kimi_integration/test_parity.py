"""Bit-exact parity of FusedKimiProcessor with the spec oracle (sizes, batches, video, uint8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.reference_kimi import (
    CLIP_CFG,
    KIMI_K25_CFG,
    ref_normalize,
    ref_preprocess,
    ref_resize_target,
    ref_video_limit,
)
from vlm_fastpath.kimi_integration import (
    FusedKimiProcessor,
    KimiProcessorError,
    build_normalize_lut,
)

from .helpers import assert_parity, decode, encode, img, rand_image, video

SMALL_SIZES = [
    (1, 1),
    (13, 13),
    (14, 14),
    (27, 29),
    (28, 28),
    (100, 37),
    (640, 480),
    (1280, 720),
    (7200, 300),
    (300, 7200),
    (8000, 20),
]
BIG_SIZES = [(2048, 2048), (3000, 3000), (4032, 3024)]


def _seed(width: int, height: int) -> int:
    return width * 100_003 + height


# -- 1. sizes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SMALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_parity_sizes_kimi(proc, size):
    width, height = size
    image = rand_image(_seed(width, height), width, height)
    assert_parity(proc, [img(image)], KIMI_K25_CFG)


@pytest.mark.slow
@pytest.mark.parametrize("size", BIG_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_parity_sizes_kimi_big(proc, size):
    width, height = size
    image = rand_image(_seed(width, height), width, height)
    assert_parity(proc, [img(image)], KIMI_K25_CFG)


def test_spec_example_2048(proc):
    """The worked example of the spec: 2048x2048 -> 1795x1795, padded 1820, 16,900 patches."""
    image = Image.new("RGB", (2048, 2048))
    media = img(image)
    assert ref_resize_target(2048, 2048, KIMI_K25_CFG) == (1795, 1795, 25, 25, 4225)
    assert proc.media_tokens_calculator(media) == 4225
    cfg = proc.get_resize_config(media)
    assert (cfg["new_width"], cfg["new_height"], cfg["pad_width"], cfg["pad_height"]) == (
        1795,
        1795,
        25,
        25,
    )
    out = proc.preprocess([media])
    assert tuple(out["pixel_values"].shape) == (16900, 3, 14, 14)
    assert out["grid_thws"].tolist() == [[1, 130, 130]]


@pytest.mark.parametrize(
    "size", [(1, 1), (27, 29), (640, 480), (300, 7200)], ids=lambda s: f"{s[0]}x{s[1]}"
)
def test_parity_sizes_clip(clip_proc, size):
    width, height = size
    image = rand_image(_seed(width, height) + 1, width, height)
    assert_parity(clip_proc, [img(image)], CLIP_CFG)


@pytest.mark.slow
def test_parity_clip_big(clip_proc):
    image = rand_image(7, 2048, 1536)
    assert_parity(clip_proc, [img(image)], CLIP_CFG)


def test_padding_normalizes_to_minus_one(proc):
    """A padded pixel is byte 0 -> (0 - 0.5) / 0.5 = -1.0 (spec)."""
    image = Image.new("RGB", (15, 15), (255, 255, 255))
    out = proc.preprocess([img(image)])
    pv = out["pixel_values"]
    assert tuple(pv.shape) == (4, 3, 14, 14)  # 15 -> padded 28: 2x2 patches
    assert torch.all(pv[0] == 1.0)
    assert torch.all(pv[3, :, 1:, 1:] == -1.0)  # patch (1,1): only row/col 14 is real
    assert torch.all(pv[3, :, 0, 0] == 1.0)


# -- 3. batches and video --------------------------------------------------------------------
def test_mixed_batch_with_video(proc):
    frames = [rand_image(100 + i, 320, 240) for i in range(4)]
    medias = [
        img(rand_image(1, 640, 480)),
        img(rand_image(2, 33, 70)),
        video(frames),
        img(rand_image(3, 1000, 90)),
        img(rand_image(4, 1, 1)),
    ]
    out = assert_parity(proc, medias, KIMI_K25_CFG)
    assert out["grid_thws"][2, 0].item() == 4
    assert len(out["grid_thws"]) == 5


def test_batch_order_is_input_order(proc):
    """Offsets must follow the media order even though resizes finish in any order."""
    big = rand_image(11, 2000, 1500)  # slow resize first
    small = rand_image(12, 28, 28)
    out = assert_parity(proc, [img(big), img(small)], KIMI_K25_CFG)
    out_swapped = assert_parity(proc, [img(small), img(big)], KIMI_K25_CFG)
    assert torch.equal(out["pixel_values"][-4:], out_swapped["pixel_values"][:4])


def test_video_chunk_frames_of_other_sizes(proc):
    """Every frame is resized to frame 0's target, whatever its own size."""
    frames = [rand_image(20, 500, 300), rand_image(21, 700, 200), rand_image(22, 90, 90)]
    assert_parity(proc, [video(frames)], KIMI_K25_CFG)


def test_video_tokens_are_one_frame(proc):
    frames = [rand_image(30 + i, 1920, 1080) for i in range(4)]
    media = video(frames)
    limit = ref_video_limit(KIMI_K25_CFG, 4)
    assert limit == 4096
    target = ref_resize_target(1920, 1080, KIMI_K25_CFG, in_patch_limit=limit)
    assert proc.media_tokens_calculator(media) == target[4]
    assert_parity(proc, [media], KIMI_K25_CFG)


@pytest.mark.parametrize("total", [1030, 1026])
def test_video_in_patch_limit_video_uses_round(total):
    """1030/4 = 257.5 -> round() = 258 (not int() = 257); 1026/4 = 256.5 -> 256 (not 257)."""
    cfg = dict(KIMI_K25_CFG, in_patch_limit_video=total)
    width, height = 302, 480
    assert ref_video_limit(cfg, 4) == round(total / 4)
    rounded = ref_resize_target(width, height, cfg, in_patch_limit=round(total / 4))
    # the case must tell round() from floor/ceil, or it tests nothing
    other = ({math.floor(total / 4), math.ceil(total / 4)} - {round(total / 4)}).pop()
    assert rounded != ref_resize_target(width, height, cfg, in_patch_limit=other)
    frames = [rand_image(40 + i, width, height) for i in range(4)]
    proc = FusedKimiProcessor(cfg)
    assert proc.media_tokens_calculator(video(frames)) == rounded[4]
    assert proc.get_resize_config(video(frames))["new_width"] == rounded[0]
    assert_parity(proc, [video(frames), img(frames[0])], cfg)


def test_video_in_patch_limit_each_frame_none_falls_back(kimi_cfg):
    cfg = dict(kimi_cfg, in_patch_limit_each_frame=None, in_patch_limit=900)
    frames = [rand_image(50 + i, 800, 600) for i in range(2)]
    assert_parity(FusedKimiProcessor(cfg), [video(frames)], cfg)


def test_single_media_dict_and_numpy_return(proc):
    image = rand_image(60, 99, 57)
    exp_pv, exp_grid, _ = ref_preprocess([img(image)], KIMI_K25_CFG)
    out = proc.preprocess(img(image), return_tensors="np")
    assert isinstance(out["pixel_values"], np.ndarray)
    assert np.array_equal(out["pixel_values"], exp_pv.numpy())
    assert np.array_equal(out["grid_thws"], exp_grid.numpy())
    out_call = proc([img(image)])
    assert torch.equal(out_call["pixel_values"], exp_pv)


def test_fixed_output_tokens():
    cfg = dict(KIMI_K25_CFG, fixed_output_tokens=77)
    assert_parity(FusedKimiProcessor(cfg), [img(rand_image(61, 300, 200))], cfg)


# -- 4. uint8 output -------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(1, 1), (27, 29), (640, 480), (7200, 300)])
def test_uint8_output(proc, size):
    image = rand_image(_seed(*size) + 2, *size)
    assert_parity(proc, [img(image)], KIMI_K25_CFG, uint8=True)


def test_uint8_output_batch_with_video(clip_proc):
    frames = [rand_image(70 + i, 200, 150) for i in range(4)]
    medias = [img(rand_image(80, 500, 333)), video(frames), img(rand_image(81, 13, 13))]
    assert_parity(clip_proc, medias, CLIP_CFG, uint8=True)


@pytest.mark.parametrize("flags", [(True, False), (False, True)])
def test_mixed_rescale_normalize_flags_raise(proc, flags):
    do_rescale, do_normalize = flags
    with pytest.raises(KimiProcessorError, match="do_rescale and do_normalize"):
        proc.preprocess(
            [img(rand_image(1, 20, 20))], do_rescale=do_rescale, do_normalize=do_normalize
        )


# -- 8. real photographs -------------------------------------------------------------------------
PHOTOS = ["astronaut", "coffee", "chelsea", "camera"]


def _photo(name: str) -> Image.Image:
    skdata = pytest.importorskip("skimage.data")
    array = getattr(skdata, name)()
    image = Image.fromarray(array)
    assert image.mode == ("L" if name == "camera" else "RGB")
    return image


@pytest.mark.parametrize("name", PHOTOS)
def test_real_photo_parity(proc, clip_proc, name):
    photo = _photo(name)
    assert_parity(proc, [img(photo)], KIMI_K25_CFG)
    assert_parity(clip_proc, [img(photo)], CLIP_CFG)


@pytest.mark.parametrize("name", PHOTOS)
def test_real_photo_jpeg_roundtrip(proc, name):
    data = encode(_photo(name), "JPEG", quality=90)
    assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(decode(data))])


@pytest.mark.slow
def test_real_photo_downscaled_batch(proc):
    """Photos upscaled past the limits go through a real downscale (not the identity)."""
    photos = [_photo(name).resize((2100, 1700), Image.BICUBIC) for name in PHOTOS]
    assert ref_resize_target(2100, 1700, KIMI_K25_CFG)[0] < 2100
    assert_parity(proc, [img(p) for p in photos], KIMI_K25_CFG)


# -- 9. LUT exactness ------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [KIMI_K25_CFG, CLIP_CFG], ids=["kimi", "clip"])
def test_lut_matches_oracle_float_ops(cfg):
    lut = build_normalize_lut(cfg["image_mean"], cfg["image_std"])
    assert lut.shape == (3, 256) and lut.dtype == np.float32
    values = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)  # (256, 3) "HWC"
    expected = ref_normalize(values, cfg)
    assert expected.dtype == np.float32
    assert np.array_equal(lut.view(np.uint32), expected.T.view(np.uint32))


def test_lut_naive_float32_formula_differs_for_clip():
    """The LUT test can fail: a float32 formula is off for CLIP statistics (spec section 4)."""
    values = np.arange(256, dtype=np.float32)
    mean = np.asarray(CLIP_CFG["image_mean"], dtype=np.float32)[:, None]
    std = np.asarray(CLIP_CFG["image_std"], dtype=np.float32)[:, None]
    naive = (values / np.float32(255.0) - mean) / std
    lut = build_normalize_lut(CLIP_CFG["image_mean"], CLIP_CFG["image_std"])
    assert int((naive != lut).sum()) > 100
