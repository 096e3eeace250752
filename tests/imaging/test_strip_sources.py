"""The source rows a strip of patch rows reads, as the speculative work waits for them.

Work that starts on a decoding image waits, strip by strip, for the source rows the strip
reads (``resample.source_rows_read`` for Kimi, ``qwen_integration.speculative._source_rows``
for Qwen). Here every row past that count is garbage: the strip's patches must still equal
the whole image's, so no strip reads a row it did not wait for.
"""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.decode_corpus import photo_like
from fixtures.reference_kimi import KIMI_K25_CFG
from vlm_fastpath.imaging import resample
from vlm_fastpath.kimi_integration.config import KimiMediaConfig
from vlm_fastpath.kimi_integration.navit_resize import plan_image
from vlm_fastpath.kimi_integration.normalize_lut import build_normalize_lut

pytestmark = pytest.mark.skipif(not resample.kernel_enabled(), reason="numba kernels off")


def _strips(grid_h: int) -> list[tuple[int, int]]:
    cuts = sorted({0, 1, grid_h // 3, grid_h // 2, grid_h - 1, grid_h})
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


@pytest.mark.parametrize("size", [(3001, 2203), (2049, 2047), (4032, 3024)])
def test_kimi_strips_read_only_the_rows_they_wait_for(size):
    config = KimiMediaConfig.from_dict(KIMI_K25_CFG)
    plan = plan_image(config, *size)
    assert (plan.new_width, plan.new_height) != size
    pixels = photo_like(*size, seed=size[0])
    lut = build_normalize_lut(config.image_mean, config.image_std)
    p = plan.patch_size
    whole = np.zeros((plan.num_patches, 3, p, p), np.float32)
    args = resample.array_band_args(pixels, plan.new_width, plan.new_height)
    resample.run_patch_rows(args, lut, whole, plan.grid_w, p, 0, plan.grid_h, 1)
    rng = np.random.default_rng(0)
    for g0, g1 in _strips(plan.grid_h):
        need = resample.source_rows_read(args, p, g0, g1)
        assert need <= size[1] and (need > 0) is (g0 * p < plan.new_height)
        spoiled = pixels.copy()
        spoiled[need:] = rng.integers(0, 256, spoiled[need:].shape, np.uint8)
        out = np.zeros_like(whole)
        resample.run_patch_rows(
            resample.array_band_args(spoiled, plan.new_width, plan.new_height), lut, out,
            plan.grid_w, p, g0, g1, 1)
        part = slice(g0 * plan.grid_w, g1 * plan.grid_w)
        assert np.array_equal(out[part], whole[part]), (g0, g1, need)


@pytest.mark.parametrize("size", [(1203, 917), (3001, 2203), (701, 1403)])
def test_qwen_strips_read_only_the_rows_they_wait_for(size):
    pytest.importorskip("torch")
    from vlm_fastpath.imaging.torch_taps import axis_taps
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, speculative
    from vlm_fastpath.qwen_integration.patchify_kernel import (
        resize_patchify_frames,
        vertical_kernels_available,
    )

    if not vertical_kernels_available():
        pytest.skip("the fused kernel is off")
    fast = FastQwen2VLImageProcessor(mode="torchvision")
    config = fast.config
    p, m, t = config.patch_size, config.merge_size, config.temporal_patch_size
    plan = fast._plan(config, size[1], size[0])
    assert plan.height != size[1] and plan.width != size[0]
    pixels = photo_like(*size, seed=size[1])
    lut = fast._lut(config)
    taps = axis_taps(size[1], plan.height)
    whole = np.zeros((plan.num_patches, 3 * t * p * p), lut.dtype)
    assert resize_patchify_frames([(pixels, taps, whole, plan.grid_h, plan.grid_w)], lut, p, m,
                                  t)
    rng = np.random.default_rng(1)
    rows = plan.grid_h // m
    for a, b in _strips(rows):
        g0, g1 = a * m, b * m
        lo, hi, strip_taps = speculative._source_rows(taps, g0, g1, p)
        spoiled = pixels.copy()
        spoiled[hi:] = rng.integers(0, 256, spoiled[hi:].shape, np.uint8)
        spoiled[:lo] = rng.integers(0, 256, spoiled[:lo].shape, np.uint8)
        out = np.zeros((g1 * plan.grid_w - g0 * plan.grid_w, whole.shape[1]), lut.dtype)
        assert resize_patchify_frames([(spoiled[lo:hi], strip_taps, out, g1 - g0, plan.grid_w)],
                                      lut, p, m, t)
        assert np.array_equal(out, whole[g0 * plan.grid_w : g1 * plan.grid_w]), (g0, g1)


@pytest.mark.parametrize("size", [(1203, 917), (1501, 2003), (700, 14)])
def test_kimi_kept_strips_read_only_their_own_rows(size):
    """An image kept at its size: a strip reads source rows up to ``g1 * p`` (the image's
    last row in the last strip, whose bottom the kernel pads)."""
    from vlm_fastpath.kimi_integration.patchify_kernel import patchify_frame
    from vlm_fastpath.kimi_integration.speculative import patch_kept_rows

    config = KimiMediaConfig.from_dict(KIMI_K25_CFG)
    plan = plan_image(config, *size)
    assert (plan.new_width, plan.new_height) == size
    pixels = photo_like(*size, seed=size[1])
    lut = build_normalize_lut(config.image_mean, config.image_std)
    p = plan.patch_size
    whole = np.zeros((plan.num_patches, 3, p, p), np.float32)
    patchify_frame(pixels, lut, whole, plan.grid_h, plan.grid_w, p, parallel=False)
    rng = np.random.default_rng(2)
    for g0, g1 in _strips(plan.grid_h):
        need = min(g1 * p, size[1])
        spoiled = pixels.copy()
        spoiled[need:] = rng.integers(0, 256, spoiled[need:].shape, np.uint8)
        spoiled[: g0 * p] = rng.integers(0, 256, spoiled[: g0 * p].shape, np.uint8)
        out = np.zeros_like(whole)
        patch_kept_rows(spoiled, lut, out, plan, g0, g1, parallel=False)
        part = slice(g0 * plan.grid_w, g1 * plan.grid_w)
        assert np.array_equal(out[part], whole[part]), (g0, g1, need)
