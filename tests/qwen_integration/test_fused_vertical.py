"""torch's resize passes in numba: the vertical pass fused with the patch kernel, and the
horizontal pass, each against torch's own resize.

The reference is torch itself (``F.interpolate`` uint8 antialiased bicubic, what the
transformers torchvision processor calls; for the fused vertical pass, followed by the plain
patch kernel, whose layout ``test_backends`` checks against transformers). Only torch and numba
are needed, so this runs in the core suite too; ``test_parity`` covers the processor end to end
against transformers.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from fixtures.pillow_blocks import pillow_blocks
from vlm_fastpath.imaging.torch_taps import axis_taps
from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, patchify_kernel
from vlm_fastpath.qwen_integration.normalize_lut import build_lut
from vlm_fastpath.qwen_integration.resize import TorchResizer

from .helpers import rand_array, smooth_image

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="the fused vertical pass needs numba",
)

RESIZE = TorchResizer()


def torch_horizontal(src: np.ndarray, width: int, bands: int = 1) -> list[np.ndarray]:
    """torch's horizontal pass alone, as ``bands`` row bands (HWC views, top to bottom): torch
    resizes width first and rounds to uint8 before the vertical pass, and each row's pass is
    its own, so a width-only resize of a band of rows is exactly those rows of that
    intermediate."""
    if src.shape[1] == width:
        return [src]  # torch skips the horizontal pass too
    edges = sorted({round(k * src.shape[0] / bands) for k in range(bands + 1)})
    return [RESIZE(src[a:b], b - a, width) for a, b in zip(edges[:-1], edges[1:], strict=True)]


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
        torch_horizontal(src, width, bands), axis_taps(src.shape[0], height), lut, got,
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
    half = torch_horizontal(src, 28)
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
    16 MiB Pillow block), and never calls ``np.asarray`` (both numba passes read RGBX). The
    bytes are those of the same pixels given as an array."""
    from PIL import Image

    reads = []
    original = Image.Image.__array_interface__

    def counting(self: Image.Image) -> dict:
        reads.append(self.size)
        return original.fget(self)

    monkeypatch.setattr(Image.Image, "__array_interface__", property(counting))
    processor = FastQwen2VLImageProcessor(mode="torchvision", max_pixels=4_000_000)
    # not resized; resized (width too); only the height resized (560 is 20 * 28)
    for width, height in ((56, 84), (300, 200), (560, 85)):
        array = rand_array(width, width, height)
        expected = processor(array.copy(), return_tensors="pt")["pixel_values"]
        for one_block in (True, False):
            with pillow_blocks(one_block):
                image = Image.fromarray(array)
            reads.clear()
            got = processor(image, return_tensors="pt")["pixel_values"]
            assert not reads, (width, height, one_block)
            assert torch.equal(got, expected), (width, height, one_block)


# -- the horizontal pass ------------------------------------------------------------------------
def _horizontal_equals_torch(src: np.ndarray, width: int, workers: int, rgbx: bool) -> None:
    """Our horizontal pass (reading ``src`` as Pillow's RGBX bytes if ``rgbx``; on the resize
    pool's threads when ``workers`` > 1) against torch's width-only resize of the RGB bytes."""
    from vlm_fastpath.imaging.resize_pool import get_pool

    expected = RESIZE(src, src.shape[0], width)
    pixels = _rgbx(src) if rgbx else src
    pool = get_pool() if workers > 1 else None
    got = patchify_kernel.horizontal_pass(pixels, width, pool, workers)
    assert got.shape == expected.shape
    assert torch.equal(torch.from_numpy(np.ascontiguousarray(got)),
                       torch.from_numpy(np.ascontiguousarray(expected)))


def test_horizontal_pass_equals_torch_over_sizes():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=150, deadline=None, derandomize=True)
    @hypothesis.given(
        in_h=st.integers(1, 300), in_w=st.integers(1, 700), out_w=st.integers(1, 700),
        workers=st.integers(1, 4), rgbx=st.booleans(), seed=st.integers(0, 2**16),
    )
    def check(in_h, in_w, out_w, workers, rgbx, seed):
        hypothesis.assume(out_w != in_w)  # torch skips the pass; so does the processor
        _horizontal_equals_torch(rand_array(seed, in_w, in_h), out_w, workers, rgbx)

    check()


@pytest.mark.parametrize("case", [
    (2048, 2048, 2044),  # the common 2048² -> 2044²
    (3024, 4032, 3836),  # a phone photo, barely shrunk
    (200, 4032, 448),  # a 9x shrink: many taps
    (1, 500, 36), (500, 1, 2), (3, 2, 1),  # one-pixel edges
    (97, 3001, 2996),  # extreme aspect ratio
    (60, 80, 560),  # upscaling
    (130, 70, 71),  # rows in several 64-row blocks, the last one partial
])
@pytest.mark.parametrize("rgbx", [False, True])
def test_horizontal_pass_named_sizes_equal_torch(case, rgbx):
    in_h, in_w, out_w = case
    src = rand_array(in_h * 7 + in_w, in_w, in_h)
    for workers in (1, 2, 3):
        _horizontal_equals_torch(src, out_w, workers, rgbx)


def test_horizontal_pass_photographs_equal_torch():
    data = pytest.importorskip("skimage.data")
    for photo in (data.astronaut(), data.coffee(), data.chelsea(), data.rocket(),
                  np.asarray(smooth_image(3, 1023, 767))):
        for width in (photo.shape[1] // 3, photo.shape[1] - 4, photo.shape[1] * 2 + 1):
            _horizontal_equals_torch(np.ascontiguousarray(photo), width, 2, False)


def test_horizontal_pass_rejects_what_it_cannot_read():
    for bad, width in ((np.zeros((4, 4), np.uint8), 2), (np.zeros((4, 4, 2), np.uint8), 2),
                       (np.zeros((4, 4, 3), np.float32), 2), (np.zeros((4, 4, 3), np.uint8), 0)):
        with pytest.raises(ValueError, match="HWC uint8"):
            patchify_kernel.horizontal_pass(bad, width)


# -- both passes fused with the patch writes ----------------------------------------------------
def _fused_equals_torch(src: np.ndarray, grid_h: int, grid_w: int, geometry: tuple[int, ...],
                        dtype: str, workers: int, rgbx: bool) -> None:
    """``resize_patchify_frame`` (reading ``src`` as RGBX if ``rgbx``; bands on the resize
    pool when ``workers`` > 1) against torch's whole resize then the plain patch kernel."""
    from vlm_fastpath.imaging.resize_pool import get_pool

    p, m, t = geometry
    lut = _lut(dtype)
    expected = np.empty((grid_h * grid_w, 3 * t * p * p), dtype=lut.dtype)
    patchify_kernel.patchify_frame(RESIZE(src, grid_h * p, grid_w * p), lut, expected, grid_h,
                                   grid_w, p, m, t)
    got = np.full_like(expected, 7)
    patchify_kernel.resize_patchify_frame(
        _rgbx(src) if rgbx else src, axis_taps(src.shape[0], grid_h * p), lut, got, grid_h,
        grid_w, p, m, t, pool=get_pool() if workers > 1 else None, workers=workers)
    assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected))


def test_fused_resize_equals_torch_over_sizes():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=120, deadline=None, derandomize=True)
    @hypothesis.given(
        in_h=st.integers(1, 500), in_w=st.integers(1, 500),
        blocks_h=st.integers(1, 12), blocks_w=st.integers(1, 12),
        geometry=st.sampled_from([(14, 2, 2), (16, 2, 2), (14, 2, 1), (8, 1, 3)]),
        dtype=st.sampled_from(["float32", "uint8"]), workers=st.integers(1, 4),
        rgbx=st.booleans(), seed=st.integers(0, 2**16),
    )
    def check(in_h, in_w, blocks_h, blocks_w, geometry, dtype, workers, rgbx, seed):
        p, m, _ = geometry
        hypothesis.assume(blocks_h * m * p != in_h and blocks_w * m * p != in_w)
        _fused_equals_torch(rand_array(seed, in_w, in_h), blocks_h * m, blocks_w * m, geometry,
                            dtype, workers, rgbx)

    check()


@pytest.mark.parametrize("case", [
    (2048, 2048, 146, 146),  # the common 2048² -> 2044²
    (1024, 1024, 74, 74),  # 1024² -> 1036²: both passes upscale
    (1080, 1920, 78, 138),  # 1080p
    (3024, 4032, 108, 144),  # a phone photo, shrunk
    (1, 500, 2, 36), (500, 1, 36, 2),  # one-pixel edges, stretched
    (97, 3001, 2, 214),  # extreme aspect ratio
    (60, 80, 40, 40),  # upscaling
])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_fused_resize_named_sizes_equal_torch(case, dtype):
    in_h, in_w, grid_h, grid_w = case
    src = rand_array(in_h + 3 * in_w, in_w, in_h)
    for workers, rgbx in ((1, False), (2, True), (3, False)):
        _fused_equals_torch(src, grid_h, grid_w, (14, 2, 2), dtype, workers, rgbx)


def test_fused_resize_photographs_equal_torch():
    data = pytest.importorskip("skimage.data")
    for photo in (data.astronaut(), data.coffee(), data.chelsea(), data.rocket(),
                  np.asarray(smooth_image(3, 1023, 767))):
        h, w = photo.shape[:2]
        for grid_h, grid_w in ((h // 28 * 2 + 2, w // 28 * 2), (2 * (h // 20), 2 * (w // 20))):
            _fused_equals_torch(np.ascontiguousarray(photo), grid_h, grid_w, (14, 2, 2),
                                "float32", 2, False)


def _frames_equal_torch(sources: list[np.ndarray], grids: list[tuple[int, int]],
                        geometry: tuple[int, ...], dtype: str, workers: int,
                        rgbx: bool) -> None:
    """``resize_patchify_frames`` over ``sources`` (their bands in one job loop) against
    torch's whole resize then the plain patch kernel, image by image, each into its own
    slice of one output as the processor lays them out. A source already of its grid's
    size goes in without taps (patchified only), as the processor hands it over."""
    from vlm_fastpath.imaging.resize_pool import get_pool

    p, m, t = geometry
    lut = _lut(dtype)
    patches = [grid_h * grid_w for grid_h, grid_w in grids]
    expected = np.empty((sum(patches), 3 * t * p * p), dtype=lut.dtype)
    got = np.full_like(expected, 7)
    frames = []
    offset = 0
    for src, (grid_h, grid_w), count in zip(sources, grids, patches, strict=True):
        plain = src.shape[:2] == (grid_h * p, grid_w * p)
        patchify_kernel.patchify_frame(src if plain else RESIZE(src, grid_h * p, grid_w * p),
                                       lut, expected[offset:offset + count], grid_h, grid_w,
                                       p, m, t)
        taps = None if plain else axis_taps(src.shape[0], grid_h * p)
        frames.append((_rgbx(src) if rgbx else src, taps, got[offset:offset + count], grid_h,
                       grid_w))
        offset += count
    assert patchify_kernel.resize_patchify_frames(
        frames, lut, p, m, t, pool=get_pool() if workers > 1 else None, workers=workers)
    assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected))


def test_fused_frames_equal_torch_over_sizes():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    size = st.tuples(st.integers(1, 400), st.integers(1, 400), st.integers(1, 8),
                     st.integers(1, 8))

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(
        sizes=st.lists(size, min_size=1, max_size=5),
        geometry=st.sampled_from([(14, 2, 2), (16, 2, 2), (14, 2, 1), (8, 1, 3)]),
        dtype=st.sampled_from(["float32", "uint8"]), workers=st.integers(1, 4),
        rgbx=st.booleans(), seed=st.integers(0, 2**16),
    )
    def check(sizes, geometry, dtype, workers, rgbx, seed):
        p, m, _ = geometry
        grids = [(bh * m, bw * m) for _, _, bh, bw in sizes]
        # every third image already of its grid's size (patchified only, same loop)
        sources = [rand_array(seed + k, grid_w * p, grid_h * p) if (seed + k) % 3 == 0
                   else rand_array(seed + k, in_w, in_h)
                   for k, ((in_h, in_w, _, _), (grid_h, grid_w)) in enumerate(
                       zip(sizes, grids, strict=True))]
        _frames_equal_torch(sources, grids, geometry, dtype, workers, rgbx)

    check()


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_fused_frames_named_sizes_and_photographs_equal_torch(dtype):
    data = pytest.importorskip("skimage.data")
    sources = [rand_array(1, 2048, 2048), rand_array(2, 1024, 768), rand_array(3, 3001, 97),
               np.ascontiguousarray(data.astronaut()), np.ascontiguousarray(data.coffee()),
               rand_array(4, 4032, 3024), np.ascontiguousarray(data.coffee()[:392, :588])]
    grids = [(146, 146), (56, 74), (2, 214), (36, 36), (28, 42), (216, 288), (28, 42)]
    for workers, rgbx in ((1, False), (2, True), (3, False)):
        _frames_equal_torch(sources, grids, (14, 2, 2), dtype, workers, rgbx)


def test_fused_frames_mismatched_arguments_are_value_errors():
    src = rand_array(0, 60, 60)
    lut = _lut("uint8")
    out = np.empty((4, 1176), dtype=np.uint8)
    good = (src, axis_taps(60, 28), out, 2, 2)
    plain = rand_array(1, 28, 28)
    for bad, match in (((src, axis_taps(60, 56), out, 2, 2), "taps for"),
                       ((src, axis_taps(90, 28), out, 2, 2), "past the frame"),
                       ((src, axis_taps(60, 28), out[:3], 2, 2), "out must be"),
                       ((src, axis_taps(60, 28), out.astype(np.float32), 2, 2), "table of"),
                       ((src, None, out, 2, 2), "does not match grid"),
                       ((plain, None, out[:3], 2, 2), "out must be"),
                       ((plain[:, :, 0], None, out, 2, 2), "HWC uint8")):
        with pytest.raises(ValueError, match=match):
            patchify_kernel.resize_patchify_frames([good, bad], lut, 14, 2, 2)


def test_a_call_with_several_images_runs_in_one_loop(monkeypatch):
    """Images resized on both sides, or on neither, go through ``resize_patchify_frames``,
    one loop for the call; an image resized on one side only sends the whole call the old
    way."""
    from vlm_fastpath.qwen_integration import processor as processor_module

    calls = []
    real = processor_module.resize_patchify_frames

    def spy(frames, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(len(frames))
        return real(frames, *args, **kwargs)

    monkeypatch.setattr(processor_module, "resize_patchify_frames", spy)
    processor = FastQwen2VLImageProcessor(mode="torchvision")
    images = [rand_array(1, 300, 200), rand_array(2, 333, 517), rand_array(3, 100, 90)]
    processor(images, return_tensors="pt")
    assert calls == [3]
    processor([*images, rand_array(4, 56, 56)], return_tensors="pt")  # 56² is not resized
    assert calls == [3, 4]
    processor([*images, rand_array(5, 56, 61)], return_tensors="pt")  # height 61 -> 56 only
    assert calls == [3, 4]


def test_fused_resize_mismatched_arguments_are_value_errors():
    src = rand_array(0, 60, 60)
    lut = _lut("uint8")
    out = np.empty((4, 1176), dtype=np.uint8)
    with pytest.raises(ValueError, match="taps for"):
        patchify_kernel.resize_patchify_frame(src, axis_taps(60, 56), lut, out, 2, 2, 14, 2, 2)
    with pytest.raises(ValueError, match="past the frame"):
        patchify_kernel.resize_patchify_frame(src, axis_taps(90, 28), lut, out, 2, 2, 14, 2, 2)
    with pytest.raises(ValueError, match="HWC uint8"):
        patchify_kernel.resize_patchify_frame(src[:, :, 0], axis_taps(60, 28), lut, out, 2, 2,
                                              14, 2, 2)
    with pytest.raises(ValueError, match="out must be"):
        patchify_kernel.resize_patchify_frame(src, axis_taps(60, 28), lut, out[:3], 2, 2, 14, 2,
                                              2)
