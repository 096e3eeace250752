"""The fused numba resampler against Pillow itself (never against a port of our own).

The bare resampler (uint8 image) is compared with ``Image.resize``; the processor with the
oracle (``Image.resize`` + the reference arithmetic of ``reference_kimi``). Configs with small
patch limits make small images downscale, so every case really resizes.
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import PIL
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.imaging import resample
from vlm_fastpath.imaging.pillow_coeffs import vertical_first
from vlm_fastpath.imaging.resample import resampler_info, resize_rgb
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import assert_parity, decode, encode, img, palette_image, rand_array, video
from .resample_cases import SMALL, SMALL_CLIP

KERNEL_EXPECTED = (
    importlib.util.find_spec("numba") is not None
    and os.environ.get("VLM_FASTPATH_NUMBA") != "0"
    and PIL.__version__ in resample.VERIFIED_PILLOW
)
needs_kernel = pytest.mark.skipif(
    not KERNEL_EXPECTED, reason="numba missing/disabled or Pillow not verified: no kernel"
)
pytestmark = needs_kernel

SMALL_CFG = SMALL  # anything above ~240x240 downscales
SMALL_CLIP_CFG = SMALL_CLIP
FILTERS = ["bicubic", "bilinear", "lanczos"]


def _pil(array: np.ndarray, width: int, height: int, filter_name: str = "bicubic") -> np.ndarray:
    resample_id = Image.Resampling[filter_name.upper()]
    return np.asarray(Image.fromarray(array).resize((width, height), resample_id))


def _assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if not np.array_equal(got, expected):
        diff = np.abs(got.astype(np.int16) - expected.astype(np.int16))
        bad = int((diff > 0).sum())
        raise AssertionError(f"{bad} of {diff.size} bytes differ, max {diff.max()}")


def test_kernel_is_the_resampler():
    info = resampler_info()
    assert info["resampler"] == "numba-fused", info
    assert PIL.__version__ in info["reason"]


# -- the bare resampler against Image.resize -----------------------------------------------------
@st.composite
def size_pairs(draw):
    """Source and target sizes: down/up-scaling, 1-pixel edges, 1xN, Nx1, extreme ratios."""
    kind = draw(st.sampled_from(["any", "down", "up", "line", "extreme", "tiny"]))
    if kind == "down":
        w, h = draw(st.integers(2, 300)), draw(st.integers(2, 300))
        ow, oh = draw(st.integers(1, w)), draw(st.integers(1, h))
    elif kind == "up":
        w, h = draw(st.integers(1, 60)), draw(st.integers(1, 60))
        ow, oh = draw(st.integers(w, 200)), draw(st.integers(h, 200))
    elif kind == "line":  # 1xN and Nx1, on either side
        n, m = draw(st.integers(1, 500)), draw(st.integers(1, 300))
        w, h, ow, oh = draw(st.sampled_from([(1, n, 1, m), (n, 1, m, 1), (1, n, m, 1),
                                             (n, 1, 1, m), (1, n, 3, m)]))
    elif kind == "extreme":  # beyond 100:1 (Pillow 12.2-12.3 split those)
        long, short = draw(st.integers(300, 2000)), draw(st.integers(1, 4))
        w, h = draw(st.sampled_from([(short, long), (long, short)]))
        ow, oh = draw(st.integers(1, 2 * w + 2)), draw(st.integers(1, 2 * h + 2))
    elif kind == "tiny":
        w, h, ow, oh = (draw(st.integers(1, 6)) for _ in range(4))
    else:
        w, h = draw(st.integers(1, 250)), draw(st.integers(1, 250))
        ow, oh = draw(st.integers(1, 250)), draw(st.integers(1, 250))
    return w, h, ow, oh


@settings(max_examples=150, deadline=None)
@given(sizes=size_pairs(), filter_name=st.sampled_from(FILTERS), seed=st.integers(0, 2**16))
def test_bare_resampler_equals_pillow(sizes, filter_name, seed):
    w, h, ow, oh = sizes
    array = rand_array(seed, w, h)
    _assert_same(resize_rgb(array, ow, oh, filter_name), _pil(array, ow, oh, filter_name))


def _with_order(array: np.ndarray, ow: int, oh: int, first_vertical: bool) -> np.ndarray:
    """The kernel forced into one pass order (to show the order matters)."""
    pixels = np.ascontiguousarray(array).reshape(array.shape[0], -1)
    args = list(resample._band_args(pixels, 3, ow, oh, "bicubic"))
    args[-1] = first_vertical
    out = np.empty((oh * ow, 3, 1, 1), dtype=np.uint8)
    lut = np.tile(np.arange(256, dtype=np.uint8), (3, 1))
    resample._run_band(tuple(args), lut, out, ow, 1, 0, oh)
    return out.reshape(oh, ow, 3)


# (W, H, ow, oh) on both sides of Pillow 13's rule (H-oh) > 2*(W-ow), and growing widths.
RULE_EDGES = [
    (100, 300, 50, 199),  # 101 > 100: vertical first
    (100, 300, 50, 200),  # 100 > 100 is false: horizontal first
    (61, 400, 40, 357),  # 43 > 42
    (61, 400, 40, 358),  # 42 > 42 false
    (50, 300, 80, 290),  # width grows: 10 > -60, vertical first
    (50, 300, 80, 301),  # height grows: never vertical first
    (3, 400, 2, 100),  # taller than 100x: Pillow 12.2-12.3 split it too
]


@pytest.mark.parametrize("sizes", RULE_EDGES, ids=lambda s: "{}x{}-{}x{}".format(*s))
def test_pass_order_rule_edges(sizes):
    w, h, ow, oh = sizes
    array = rand_array(sum(sizes), w, h)
    expected = _pil(array, ow, oh)
    _assert_same(resize_rgb(array, ow, oh), expected)
    order = vertical_first(w, h, ow, oh)
    _assert_same(_with_order(array, ow, oh, order), expected)


def test_wrong_pass_order_is_detected():
    """The edge cases above can fail: the other order changes bytes there."""
    changed = 0
    for w, h, ow, oh in RULE_EDGES[:5]:
        array = rand_array(w + h, w, h)
        order = vertical_first(w, h, ow, oh)
        changed += not np.array_equal(_with_order(array, ow, oh, not order), _pil(array, ow, oh))
    assert changed >= 4


@pytest.mark.parametrize("filter_name", FILTERS)
def test_bare_resampler_many_random_sizes(filter_name):
    rng = np.random.default_rng(len(filter_name))
    for _ in range(120):
        w, h, ow, oh = (int(v) for v in rng.integers(1, 160, 4))
        array = rand_array(int(rng.integers(1 << 30)), w, h)
        _assert_same(resize_rgb(array, ow, oh, filter_name),
                     _pil(array, ow, oh, filter_name))


@pytest.mark.slow
def test_bare_resampler_kimi_sizes():
    for w, h, ow, oh in [(2048, 2048, 1795, 1795), (4032, 3024, 2072, 1554), (3000, 500, 2900, 80)]:
        array = rand_array(w, w, h)
        _assert_same(resize_rgb(array, ow, oh), _pil(array, ow, oh))


def test_bare_resampler_rejects_bad_input():
    with pytest.raises(ValueError):
        resize_rgb(np.zeros((4, 4), np.uint8), 2, 2)
    with pytest.raises(ValueError):
        resize_rgb(np.zeros((4, 4, 3), np.uint8), 0, 2)


# -- the processor (fused pad + normalize + patchify) against the oracle -----------------------
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@st.composite
def image_sizes(draw):
    kind = draw(st.sampled_from(["any", "wide", "tall", "tiny"]))
    if kind == "wide":
        return draw(st.integers(300, 3000)), draw(st.integers(1, 12))
    if kind == "tall":
        return draw(st.integers(1, 12)), draw(st.integers(300, 3000))
    if kind == "tiny":
        return draw(st.integers(1, 30)), draw(st.integers(1, 30))
    return draw(st.integers(1, 700)), draw(st.integers(1, 700))


# A processor case: image size, patch limits and size, CLIP or Kimi statistics, output dtype.
PROCESSOR_CASES = {
    "size": image_sizes(),
    "limit": st.integers(4, 2000),
    "side": st.integers(2, 80),
    "patch": st.sampled_from([7, 14, 16]),
    "clip": st.booleans(),
    "uint8": st.booleans(),
    "seed": st.integers(0, 2**32 - 1),
}


def case_config(limit: int, side: int, patch: int, clip: bool) -> dict:
    base = CLIP_CFG if clip else KIMI_K25_CFG
    return dict(base, in_patch_limit=limit, patch_limit_on_one_side=side, patch_size=patch)


@SETTINGS
@given(**PROCESSOR_CASES)
def test_processor_resizing_parity(size, limit, side, patch, clip, uint8, seed):
    cfg = case_config(limit, side, patch, clip)
    image = Image.fromarray(rand_array(seed, *size))
    assert_parity(FusedKimiProcessor(cfg), [img(image)], cfg, uint8=uint8)


def test_the_kernel_runs_for_resized_images(monkeypatch):
    """One image runs its bands in a job loop, several images all their bands in one job loop
    (``_frames_jobs``), and where that loop declines, as band tasks: the fused kernel in every
    case."""
    processor = FusedKimiProcessor(SMALL_CFG)  # (its warm-up runs both)
    calls = []
    for name in ("_run_band", "_band_jobs", "_frames_jobs"):
        original = getattr(resample, name)
        monkeypatch.setattr(resample, name,
                            lambda *a, name=name, f=original: calls.append(name) or f(*a))
    image = Image.fromarray(rand_array(3, 640, 480))
    assert_parity(processor, [img(image)], SMALL_CFG)
    assert calls == ["_band_jobs"], calls
    calls.clear()
    assert_parity(processor, [img(image), img(image)], SMALL_CFG)
    assert calls == ["_frames_jobs"], calls
    calls.clear()
    monkeypatch.setattr(resample, "_many_frames_jobs", lambda *a: False)
    assert_parity(processor, [img(image), img(image)], SMALL_CFG)
    assert calls and set(calls) == {"_run_band"}, calls


def _mode_images(seed: int, w: int, h: int) -> dict[str, Image.Image]:
    rgb = Image.fromarray(rand_array(seed, w, h))
    images = {mode: rgb.convert(mode) for mode in
              ["1", "L", "LA", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV", "I", "F"]}
    images["RGB"] = rgb
    images["P"] = palette_image(seed, w, h)
    images["P-transparent"] = palette_image(seed + 1, w, h, transparency=7)
    images["PA"] = rgb.convert("PA")
    images["I;16"] = rgb.convert("L").convert("I").convert("I;16")
    images["I;16B"] = rgb.convert("L").convert("I").convert("I;16B")
    return images


MODES = list(_mode_images(0, 2, 2))


@pytest.mark.parametrize("mode", MODES)
def test_every_pil_mode(mode):
    image = _mode_images(11, 333, 251)[mode]
    assert_parity(FusedKimiProcessor(SMALL_CFG), [img(image)], SMALL_CFG)


def test_array_and_tensor_inputs():
    array = rand_array(5, 401, 299)
    oracle = [img(Image.fromarray(array))]
    proc = FusedKimiProcessor(SMALL_CFG)
    assert_parity(proc, [img(array)], SMALL_CFG, oracle_medias=oracle)
    assert_parity(proc, [img(torch.from_numpy(array))], SMALL_CFG, oracle_medias=oracle)
    strided = np.ascontiguousarray(np.concatenate([array, array], axis=1))[:, ::2]
    assert_parity(proc, [img(strided)], SMALL_CFG, oracle_medias=[img(Image.fromarray(
        np.ascontiguousarray(strided)))])
    gray = rand_array(6, 300, 280, 0)
    assert_parity(proc, [img(gray)], SMALL_CFG, oracle_medias=[img(Image.fromarray(gray))])


PHOTOS = ["astronaut", "coffee", "chelsea", "camera", "rocket"]


def _photo(name: str) -> Image.Image:
    skdata = pytest.importorskip("skimage.data")
    return Image.fromarray(getattr(skdata, name)())


@pytest.mark.parametrize("name", PHOTOS)
def test_real_photos_and_jpeg(name):
    photo = _photo(name)
    assert_parity(FusedKimiProcessor(SMALL_CFG), [img(photo)], SMALL_CFG)
    assert_parity(FusedKimiProcessor(SMALL_CLIP_CFG), [img(photo)], SMALL_CLIP_CFG)
    data = encode(photo, "JPEG", quality=85)
    assert_parity(FusedKimiProcessor(SMALL_CFG), [img(data)], SMALL_CFG,
                  oracle_medias=[img(decode(data))])


@pytest.mark.slow
def test_real_photos_kimi_sizes():
    photos = [_photo(name).resize((2100, 1700), Image.Resampling.BICUBIC) for name in PHOTOS]
    medias = [img(photo) for photo in photos]
    assert_parity(FusedKimiProcessor(KIMI_K25_CFG), medias, KIMI_K25_CFG)
    assert_parity(FusedKimiProcessor(CLIP_CFG), medias[:2], CLIP_CFG)


def test_video_chunks_and_mixed_batches():
    frames = [Image.fromarray(rand_array(40 + i, 500, 380)) for i in range(4)]
    odd = [Image.fromarray(rand_array(50, 500, 380)), Image.fromarray(rand_array(51, 90, 700))]
    singles = [Image.fromarray(rand_array(i, w, h)) for i, (w, h) in enumerate(
        [(700, 90), (3, 3), (1, 900)])]
    medias = [img(singles[0]), video(frames), video(odd), img(singles[1]), img(singles[2])]
    cfg = dict(SMALL_CFG, in_patch_limit_each_frame=120)
    assert_parity(FusedKimiProcessor(cfg), medias, cfg)
    assert_parity(FusedKimiProcessor(cfg), medias, cfg, uint8=True)


@pytest.mark.slow
def test_big_batch_kimi():
    images = [Image.fromarray(rand_array(i, 2048, 2048)) for i in range(3)]
    images.append(Image.fromarray(rand_array(9, 4032, 3024)))
    assert_parity(FusedKimiProcessor(KIMI_K25_CFG), [img(im) for im in images], KIMI_K25_CFG)


# -- fallback, errors, concurrency ---------------------------------------------------------------
def test_unverified_pillow_falls_back_to_pillow(monkeypatch):
    monkeypatch.setattr(PIL, "__version__", "12.9.9")
    info = resampler_info()
    assert info["resampler"] == "pillow" and "12.9.9" in info["reason"], info
    assert not resample.kernel_enabled()

    def boom(*_args):
        raise AssertionError("kernel used with an unverified Pillow")

    monkeypatch.setattr(resample, "_run_band", boom)
    image = Image.fromarray(rand_array(8, 500, 400))
    assert_parity(FusedKimiProcessor(SMALL_CFG), [img(image), img(image)], SMALL_CFG)
    array = rand_array(9, 50, 40)
    _assert_same(resize_rgb(array, 31, 17), _pil(array, 31, 17))


def test_unverified_machine_falls_back(monkeypatch):
    monkeypatch.setattr(resample.platform, "machine", lambda: "aarch64")
    assert resampler_info()["resampler"] == "pillow"


def test_corrupt_frame_in_a_batch_raises_input_error():
    from vlm_fastpath.kimi_integration import KimiInputError

    data = encode(Image.fromarray(rand_array(1, 400, 300)), "PNG")
    good = img(Image.fromarray(rand_array(2, 500, 400)))
    proc = FusedKimiProcessor(SMALL_CFG)
    for medias in ([img(data[: len(data) // 2])], [good, img(data[: len(data) // 2]), good]):
        with pytest.raises(KimiInputError):
            proc.preprocess(medias)
    assert_parity(proc, [good], SMALL_CFG)  # the pool still works afterwards


def _thread_job(seed: int) -> bool:
    proc = FusedKimiProcessor(SMALL_CLIP_CFG if seed % 2 else SMALL_CFG)
    cfg = SMALL_CLIP_CFG if seed % 2 else SMALL_CFG
    medias = [img(Image.fromarray(rand_array(seed, 300 + 31 * seed, 260 + 7 * seed)))]
    if seed % 3 == 0:
        medias.append(video([Image.fromarray(rand_array(seed + i, 320, 240)) for i in range(2)]))
    expected, grid, _ = ref_preprocess(medias, cfg)
    ok = True
    for _ in range(3):
        out = proc.preprocess(medias)
        ok &= torch.equal(out["pixel_values"], expected) and torch.equal(out["grid_thws"], grid)
    return ok


def test_many_threads_at_once():
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(_thread_job, range(12)))
    assert all(results), results
