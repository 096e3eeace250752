"""torch's vertical resize pass fused with the patch kernel, against torch's own whole resize.

The reference is torch itself (``F.interpolate`` uint8 antialiased bicubic, what the
transformers torchvision processor calls) followed by the plain patch kernel, whose layout
``test_backends`` checks against transformers. Only torch and numba are needed, so this runs in
the core suite too; ``test_parity`` covers the fused path end to end against transformers.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from tests.support.pillow_blocks import pillow_blocks
from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, patchify_kernel
from vlm_fastpath.qwen_integration.normalize_lut import build_lut
from vlm_fastpath.qwen_integration.resize import TorchResizer
from vlm_fastpath.qwen_integration.torch_taps import axis_taps

from .helpers import rand_array, smooth_image

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="the fused vertical pass needs numba",
)

RESIZE = TorchResizer()


def _lut(dtype: str) -> np.ndarray:
    scaled = dtype == "float32"
    return build_lut("torchvision", do_rescale=scaled, rescale_factor=1 / 255,
                     do_normalize=scaled, image_mean=(0.48145466, 0.4578275, 0.40821073),
                     image_std=(0.26862954, 0.26130258, 0.27577711))


def _rgbx(src: np.ndarray) -> np.ndarray:
    """The pixels as Pillow stores RGB: 4 bytes a pixel, the 4th noise (never read)."""
    noise = np.random.default_rng(src.size).integers(0, 256, src.shape[:2], dtype=np.uint8)
    return np.concatenate([src, noise[:, :, None]], axis=2)


def _both(src: np.ndarray, grid_h: int, grid_w: int, p: int, m: int, t: int, bands: int,
          dtype: str, parallel: bool, rgbx: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(torch's whole resize then the patch kernel, the fused pass over ``bands`` bands,
    reading ``src`` as Pillow's RGBX bytes if ``rgbx``)."""
    lut = _lut(dtype)
    height, width = grid_h * p, grid_w * p
    expected = np.empty((grid_h * grid_w, 3 * t * p * p), dtype=lut.dtype)
    patchify_kernel.patchify_frame(RESIZE(src, height, width), lut, expected, grid_h, grid_w,
                                   p, m, t)
    if rgbx:
        src = _rgbx(src)
    got = np.full_like(expected, 7)
    patchify_kernel.vertical_patchify_frame(
        RESIZE.horizontal(src, width, bands), axis_taps(src.shape[0], height), lut, got,
        grid_h, grid_w, p, m, t, parallel=parallel)
    return expected, got


def test_sizes_bands_and_layouts_equal_torch():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=120, deadline=None, derandomize=True)
    @hypothesis.given(
        in_h=st.integers(1, 700), in_w=st.integers(1, 700),
        blocks_h=st.integers(1, 14), blocks_w=st.integers(1, 14),
        geometry=st.sampled_from([(14, 2, 2), (16, 2, 2), (14, 2, 1), (8, 1, 3)]),
        bands=st.integers(1, patchify_kernel.MAX_BANDS), dtype=st.sampled_from(["float32",
                                                                               "uint8"]),
        parallel=st.booleans(), rgbx=st.booleans(), seed=st.integers(0, 2**16),
    )
    def check(in_h, in_w, blocks_h, blocks_w, geometry, bands, dtype, parallel, rgbx, seed):
        p, m, t = geometry
        src = rand_array(seed, in_w, in_h)
        expected, got = _both(src, blocks_h * m, blocks_w * m, p, m, t, min(bands, in_h),
                              dtype, parallel, rgbx)
        assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected))

    check()


@pytest.mark.parametrize("case", [
    (2048, 2048, 146, 146),  # the common 2048² -> 2044²
    (3024, 4032, 216, 288),  # a phone photo at the checkpoint's largest size
    (1, 500, 2, 36), (500, 1, 36, 2),  # one-pixel edges, stretched
    (97, 3001, 2, 214),  # extreme aspect ratio
    (28, 28, 2, 2), (29, 28, 2, 2),  # no resize / a 1-row shrink
    (60, 80, 40, 40),  # upscaling
])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_named_sizes_equal_torch(case, dtype):
    in_h, in_w, grid_h, grid_w = case
    src = rand_array(in_h + in_w, in_w, in_h)
    for bands, parallel in ((1, True), (patchify_kernel.MAX_BANDS, True), (3, False)):
        expected, got = _both(src, grid_h, grid_w, 14, 2, 2, min(bands, in_h), dtype, parallel)
        assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected)), (bands, parallel)


def test_photographs_and_smooth_images_equal_torch():
    data = pytest.importorskip("skimage.data")
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    photos.append(np.asarray(smooth_image(3, 1023, 767)))
    for photo in photos:
        h, w = photo.shape[:2]
        near = (h // 28 * 2, w // 28 * 2)
        for grid_h, grid_w in (near, (2 * (h // 20), 2 * (w // 20)), (64, 64)):
            expected, got = _both(np.ascontiguousarray(photo), grid_h, grid_w, 14, 2, 2, 8,
                                  "float32", True)
            assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected))


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_processor_fused_equals_whole_resize(dtype):
    """Every path of the processor (one image, a batch per worker, fewer images than
    workers), fused and not, on images whose height changes and whose height does not."""
    kwargs = {} if dtype == "float32" else {"do_normalize": False, "do_rescale": False}
    processor = FastQwen2VLImageProcessor(mode="torchvision", max_pixels=4_000_000)
    images = [rand_array(1, 1500, 1100), rand_array(2, 333, 517), rand_array(3, 56, 56),
              rand_array(4, 990, 28)]
    for batch in ([images[0]], images[:2], images):
        outs = []
        for fused in (False, True):
            processor.fuse_vertical_pass = fused
            outs.append(processor(batch, return_tensors="pt", **kwargs))
        assert torch.equal(outs[0]["pixel_values"], outs[1]["pixel_values"])
        assert torch.equal(outs[0]["image_grid_thw"], outs[1]["image_grid_thw"])


def test_taps_follow_torchs_rules():
    """Properties of torch's int16 taps: rows in range, weights summing to one at the chosen
    precision (up to rounding), precision the largest keeping every weight under 2**15."""
    for in_size, out_size in ((2048, 2044), (3024, 3024), (5, 700), (700, 5), (1, 28)):
        taps = axis_taps(in_size, out_size)
        assert (taps.starts >= 0).all() and (taps.starts + taps.sizes <= in_size).all()
        sums = taps.weights.sum(axis=1)
        assert np.abs(sums - (1 << taps.precision)).max() <= taps.weights.shape[1]
        assert np.abs(taps.weights).max() < 1 << 15
        # one more bit would put the largest weight at or over 2**15
        assert taps.weights.max() >= 1 << 14 or taps.precision == 22


def test_mismatched_arguments_are_value_errors():
    src = rand_array(0, 60, 60)
    lut = _lut("uint8")
    out = np.empty((4, 1176), dtype=np.uint8)
    half = RESIZE.horizontal(src, 28)
    with pytest.raises(ValueError, match="grid width"):
        patchify_kernel.vertical_patchify_frame(half, axis_taps(60, 28), lut, out, 2, 4, 14, 2, 2)
    with pytest.raises(ValueError, match="taps for"):
        patchify_kernel.vertical_patchify_frame(half, axis_taps(60, 56), lut, out, 2, 2, 14, 2, 2)
    with pytest.raises(ValueError, match="past the frame"):
        patchify_kernel.vertical_patchify_frame(half, axis_taps(90, 28), lut, out, 2, 2, 14, 2, 2)
    with pytest.raises(ValueError, match="bands"):
        patchify_kernel.vertical_patchify_frame(half * 9, axis_taps(60, 28), lut, out, 2, 2, 14,
                                                2, 2)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_rgbx_frames_patchify_as_rgb(dtype):
    """A frame of Pillow's RGBX bytes (no resize: the kernel reads them directly), interleaved
    or as planes, gives the patches of its RGB bytes."""
    lut = _lut(dtype)
    grid_h, grid_w, p, m, t = 6, 4, 14, 2, 2
    rgb = rand_array(5, grid_w * p, grid_h * p)
    expected = np.empty((grid_h * grid_w, 3 * t * p * p), dtype=lut.dtype)
    patchify_kernel.patchify_frame(rgb, lut, expected, grid_h, grid_w, p, m, t)
    rgbx = _rgbx(rgb)
    planes = np.ascontiguousarray(rgbx.transpose(2, 0, 1)).transpose(1, 2, 0)
    for frame in (rgbx, planes):
        for parallel in (True, False):
            got = np.zeros_like(expected)
            patchify_kernel.patchify_frame(frame, lut, got, grid_h, grid_w, p, m, t,
                                           parallel=parallel)
            assert np.array_equal(got, expected)


def test_a_pil_image_is_read_once_and_fast(monkeypatch):
    """``np.asarray`` of a PIL image costs 2-3 ms at 2048² and 39-46 ms at 4032x3024: the
    processor reads Pillow's own RGBX memory in place, or has Pillow copy it (images over one
    16 MiB Pillow block), and calls ``np.asarray`` only where the width is resized and the
    image sits in one block. The bytes are those of the same pixels given as an array."""
    from PIL import Image

    reads = []
    original = Image.Image.__array_interface__

    def counting(self: Image.Image) -> dict:
        reads.append(self.size)
        return original.fget(self)

    monkeypatch.setattr(Image.Image, "__array_interface__", property(counting))
    processor = FastQwen2VLImageProcessor(mode="torchvision", max_pixels=4_000_000)
    # not resized; resized (width too); only the height resized (560 is 20 * 28)
    for width, height, asarray_reads in ((56, 84, 0), (300, 200, 1), (560, 85, 0)):
        array = rand_array(width, width, height)
        expected = processor(array.copy(), return_tensors="pt")["pixel_values"]
        for one_block in (True, False):
            with pillow_blocks(one_block):
                image = Image.fromarray(array)
            reads.clear()
            got = processor(image, return_tensors="pt")["pixel_values"]
            assert len(reads) == (asarray_reads if one_block else 0), (width, height, reads)
            assert torch.equal(got, expected), (width, height, one_block)
