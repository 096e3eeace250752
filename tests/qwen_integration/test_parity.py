"""torch.equal against the transformers processors themselves, both of them.

Sizes, pixel limits, PIL modes, arrays and tensors, real photographs, JPEG-decoded images,
mixed batches, Qwen2.5-VL and Qwen3-VL configs, float32 and uint8 output.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.pillow_blocks import pillow_blocks
from vlm_fastpath.qwen_integration import (
    AspectRatioError,
    FastQwen2VLImageProcessor,
    QwenInputError,
)

from .helpers import (
    CONFIGS,
    assert_same,
    hf_classes,
    jpeg_roundtrip,
    rand_array,
    rand_image,
    run_both,
    smooth_image,
    write_checkpoint,
)

UINT8 = {"do_rescale": False, "do_normalize": False}


def _expect_same_or_both_reject(hf, fast, images, **kwargs) -> None:  # noqa: ANN001
    """Equal outputs, or: transformers raises and we raise one of our ValueErrors."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            expected = hf(images=images, return_tensors="pt", **kwargs)
    except (ValueError, ZeroDivisionError, RuntimeError):
        with pytest.raises(QwenInputError):
            fast(images=images, return_tensors="pt", **kwargs)
        return
    got = fast(images=images, return_tensors="pt", **kwargs)
    assert_same(expected, got)


# -- sizes --------------------------------------------------------------------------------------
EDGE_SIZES = [
    (1, 1), (1, 2), (2, 1), (1, 150), (150, 1), (1, 200), (1, 201), (27, 27), (28, 28),
    (29, 29), (56, 55), (13, 2600), (2600, 13), (777, 555), (555, 777), (8000, 40),
    (8000, 20), (20, 8000), (4000, 20), (3999, 20), (4001, 20),
]


@pytest.mark.parametrize("size", EDGE_SIZES, ids=[f"{w}x{h}" for w, h in EDGE_SIZES])
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_edge_sizes(pairs, mode, config_name, size):
    hf, fast = pairs[(mode, config_name)]
    width, height = size
    image = rand_image(width * 7 + height, width, height)
    if max(width, height) / min(width, height) > 200:
        with pytest.raises(AspectRatioError, match="aspect ratio"):
            fast(images=[image])
        with pytest.raises(ValueError, match="aspect ratio"):
            hf(images=[image])
        return
    run_both(hf, fast, [image])
    run_both(hf, fast, [image], **UINT8)


def test_property_sizes_and_limits(pairs, mode):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    hf, fast = pairs[(mode, "qwen2.5-vl")]

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(
        width=st.integers(1, 700),
        height=st.integers(1, 700),
        min_side=st.integers(1, 40),
        max_side=st.integers(1, 40),
        how=st.sampled_from(["size", "min_max", "init"]),
        uint8=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def check(width, height, min_side, max_side, how, uint8, seed):  # noqa: ANN001
        min_pixels = (min_side * 14) ** 2
        max_pixels = max(min_pixels, (max_side * 28) ** 2)
        image = smooth_image(seed, width, height) if seed % 2 else rand_image(seed, width, height)
        extra = dict(UINT8) if uint8 else {}
        if how == "size":
            extra["size"] = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
            _expect_same_or_both_reject(hf, fast, [image], **extra)
        elif how == "min_max":
            extra.update(min_pixels=min_pixels, max_pixels=max_pixels)
            _expect_same_or_both_reject(hf, fast, [image], **extra)
        else:
            hf_cls = type(hf)
            hf2 = hf_cls(min_pixels=min_pixels, max_pixels=max_pixels)
            fast2 = FastQwen2VLImageProcessor.from_hf(hf2)
            assert fast2.size == {"shortest_edge": min_pixels, "longest_edge": max_pixels}
            _expect_same_or_both_reject(hf2, fast2, [image], **extra)

    check()


# -- inputs ---------------------------------------------------------------------------------------
def _mode_images() -> dict[str, Image.Image]:
    base = rand_image(5, 97, 61)
    rgba = Image.fromarray(rand_array(6, 97, 61, 4))
    gray = Image.fromarray(rand_array(7, 97, 61, 0))
    images = {
        "RGB": base,
        "RGBA": rgba,
        "L": gray,
        "LA": rgba.convert("LA"),
        "1": gray.convert("1"),
        "P": base.convert("P"),
        "P-transparency": base.convert("P"),
        "PA": rgba.convert("PA"),
        "CMYK": base.convert("CMYK"),
        "YCbCr": base.convert("YCbCr"),
        "HSV": base.convert("HSV"),
        "LAB": base.convert("LAB"),
        "I": gray.convert("I"),
        "F": gray.convert("F"),
        "I;16": Image.fromarray(rand_array(9, 97, 61, 0).astype(np.uint16) * 257),
        "RGBa": rgba.convert("RGBa"),
        "La": rgba.convert("La"),
    }
    images["P-transparency"].info["transparency"] = 3
    return images


MODE_IMAGES = _mode_images()


@pytest.mark.parametrize("pil_mode", list(MODE_IMAGES))
def test_every_pil_mode(pair25, pil_mode):
    hf, fast = pair25
    image = MODE_IMAGES[pil_mode]
    _expect_same_or_both_reject(hf, fast, [image])
    _expect_same_or_both_reject(hf, fast, [image], **UINT8)


@pytest.mark.parametrize("layout", ["hwc", "chw"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_arrays_and_tensors(pair25, layout, kind):
    hf, fast = pair25
    array = rand_array(11, 131, 77)
    if layout == "chw":
        array = np.ascontiguousarray(array.transpose(2, 0, 1))
    image = torch.from_numpy(array) if kind == "torch" else array
    run_both(hf, fast, [image])
    run_both(hf, fast, image)  # a single image, not a list
    # and the PIL twin gives the same bytes
    run_both(hf, fast, [Image.fromarray(rand_array(11, 131, 77))])


def test_photographs_and_jpeg(pairs, mode):
    data = pytest.importorskip("skimage.data")
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.camera()]
    images = [Image.fromarray(p) for p in photos]
    images += [jpeg_roundtrip(im, q) for im, q in zip(images[:3], (95, 75, 40), strict=True)]
    images.append(jpeg_roundtrip(smooth_image(3, 1023, 767), 85))
    for config_name in CONFIGS:
        hf, fast = pairs[(mode, config_name)]
        for image in images:
            run_both(hf, fast, [image])
        run_both(hf, fast, images)
        run_both(hf, fast, images, **UINT8)


def test_mixed_batches(pairs, mode):
    hf, fast = pairs[(mode, "qwen2.5-vl")]
    images = [
        rand_image(1, 300, 200), rand_image(2, 33, 900), rand_image(3, 300, 200),
        smooth_image(4, 640, 480), rand_image(5, 1, 1), rand_image(6, 300, 200),
    ]
    run_both(hf, fast, images)
    run_both(hf, fast, images, **UINT8)
    run_both(hf, fast, [images[:2], images[2:]])  # nested lists are flattened, like HF
    # more images than resize workers, and fewer
    run_both(hf, fast, images[:2])
    run_both(hf, fast, images * 3)


def test_pil_images_in_one_or_many_blocks(pairs, mode):
    """PIL images are read as Pillow's RGBX bytes, in place (one Pillow block) or copied by
    Pillow (many: a large photo under the default 16 MiB blocks, forced here with 4 KiB
    blocks): not resized, resized, only the height resized, 1x1, alone and batched."""
    hf, fast = pairs[(mode, "qwen2.5-vl")]
    for one_block in (True, False):
        with pillow_blocks(one_block):
            images = [rand_image(7, 56, 84), rand_image(8, 300, 200), rand_image(9, 560, 85),
                      rand_image(10, 1, 1)]
        for image in images:
            run_both(hf, fast, [image])
            run_both(hf, fast, [image], **UINT8)
        run_both(hf, fast, images)


def test_batches_whose_images_all_change_size(pairs, mode):
    """Every image resized on both sides: in torchvision mode one job loop for the whole
    call (``resize_patchify_frames``); arrays, PIL images in one block or in many, odd
    sizes, upscaled and shrunk, both dtypes."""
    hf, fast = pairs[(mode, "qwen2.5-vl")]
    arrays = [rand_array(11, 300, 200), rand_array(12, 33, 900), rand_array(13, 1023, 767),
              np.asarray(smooth_image(14, 641, 479))]
    run_both(hf, fast, arrays * 3)
    _batch_parity(hf, fast, arrays, lambda: [rand_image(15, 300, 200),
                                             smooth_image(16, 560, 85), rand_image(17, 57, 29)])


def test_batches_with_images_already_in_whole_patches(pairs, mode):
    """Images that keep their size (both sides multiples of 28, such as a 4032x3024 phone
    photo) beside images resized on both sides: in torchvision mode one job loop for the
    call; arrays and PIL images in one block or in many, both dtypes."""
    hf, fast = pairs[(mode, "qwen2.5-vl")]
    arrays = [rand_array(21, 56, 84), rand_array(22, 300, 200), rand_array(23, 588, 392),
              np.asarray(smooth_image(24, 1036, 756))]
    _batch_parity(hf, fast, arrays, lambda: [smooth_image(25, 4032, 3024),
                                             rand_image(26, 300, 200), rand_image(27, 28, 56)])


def _batch_parity(hf, fast, arrays, make_images) -> None:  # noqa: ANN001
    """One call of ``arrays``, then of the images ``make_images`` makes in one Pillow block
    and in many, each in float32 and uint8, against transformers."""
    run_both(hf, fast, arrays)
    run_both(hf, fast, arrays, **UINT8)
    for one_block in (True, False):
        with pillow_blocks(one_block):
            images = make_images()
        run_both(hf, fast, images)
        run_both(hf, fast, images, **UINT8)


@pytest.mark.slow
@pytest.mark.parametrize("size", [(1024, 1024), (2048, 2048), (4032, 3024), (1280, 960)])
def test_benchmark_sizes(pairs, mode, size):
    hf, fast = pairs[(mode, "qwen2.5-vl")]
    image = smooth_image(size[0], *size)
    run_both(hf, fast, [image])
    run_both(hf, fast, [image], **UINT8)


# -- configs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_from_pretrained_matches_hf_from_pretrained(tmp_path, mode, config_name):
    folder = write_checkpoint(tmp_path / config_name, CONFIGS[config_name])
    hf = hf_classes()[mode].from_pretrained(folder)
    fast = FastQwen2VLImageProcessor.from_pretrained(folder, mode=mode)
    assert fast.patch_size == CONFIGS[config_name]["patch_size"]
    assert fast.image_mean == tuple(CONFIGS[config_name]["image_mean"])
    images = [smooth_image(1, 640, 480), rand_image(2, 200, 333), rand_image(3, 17, 5)]
    run_both(hf, fast, images)
    run_both(hf, fast, images, **UINT8)


def test_from_pretrained_picks_mode_from_type(tmp_path):
    pil_config = {**CONFIGS["qwen2.5-vl"], "image_processor_type": "Qwen2VLImageProcessorPil"}
    folder = write_checkpoint(tmp_path / "pil", pil_config)
    assert FastQwen2VLImageProcessor.from_pretrained(folder).mode == "pil"
    folder = write_checkpoint(tmp_path / "q3", CONFIGS["qwen3-vl"])
    fast = FastQwen2VLImageProcessor.from_pretrained(folder)
    assert fast.mode == "torchvision"
    assert (fast.patch_size, fast.min_pixels, fast.max_pixels) == (16, 65536, 16777216)


@pytest.mark.parametrize(
    "overrides",
    [
        {"image_mean": [0.1, 0.2, 0.3], "image_std": [0.7, 0.8, 0.9]},
        {"do_normalize": False},
        {"do_rescale": False},
        {"rescale_factor": 1 / 127.5, "image_mean": [1.0, 1.0, 1.0], "image_std": [1.0, 1.0, 1.0]},
        {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 3},
        {"patch_size": 8, "merge_size": 3, "temporal_patch_size": 1},
    ],
    ids=["stats", "no-normalize", "no-rescale", "rescale-factor", "t3", "p8-m3-t1"],
)
def test_settings_and_call_overrides(pair25, overrides):
    hf, fast = pair25
    images = [smooth_image(8, 500, 300), rand_image(9, 64, 64)]
    run_both(hf, fast, images, **overrides)  # per call
    hf2 = type(hf)(**{**overrides, "min_pixels": 3136, "max_pixels": 12845056})
    run_both(hf2, FastQwen2VLImageProcessor.from_hf(hf2), images)  # in the constructor


@pytest.mark.parametrize("return_tensors", [None, "pt", "np"])
def test_return_types(pair25, return_tensors):
    hf, fast = pair25
    image = [rand_image(1, 120, 90)]
    expected = hf(images=image, return_tensors=return_tensors)
    got = fast(images=image, return_tensors=return_tensors)
    for key in ("pixel_values", "image_grid_thw"):
        assert type(expected[key]) is type(got[key]), (key, type(expected[key]), type(got[key]))
    assert type(got).__name__ == "BatchFeature"
    assert_same(expected, got)


def test_number_of_patches_matches_hf(pair25):
    hf, fast = pair25
    for height, width in [(1, 1), (555, 777), (3024, 4032), (20, 3999)]:
        for kwargs in (None, {"min_pixels": 100 * 100, "max_pixels": 200 * 200}):
            assert fast.get_number_of_image_patches(height, width, kwargs) == \
                hf.get_number_of_image_patches(height, width, kwargs)


@pytest.mark.parametrize("limit", [28 * 28 * 64, 28 * 28 * 256, 28 * 28 * 1024])
def test_strong_downscale(pair25, limit):
    """Big reductions (where Pillow's reduce/box paths and torch's wide filters kick in)."""
    hf, fast = pair25
    images = [smooth_image(21, 2000, 1500), rand_image(22, 1800, 700), rand_image(23, 311, 2900)]
    size = {"shortest_edge": 3136, "longest_edge": limit}
    run_both(hf, fast, images, size=size)
    run_both(hf, fast, images, size=size, **UINT8)
