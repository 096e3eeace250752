"""The fast paths behind vLLM's default Qwen-VL request (uint8 output: rescale and normalize
off, the device normalizes): the patch kernels' byte copies for the identity table, and torch's
resize passes summing windows of 3 to 8 int16 taps in registers.

References: the patch layout written out here with torch's reshape and permute (the layout
transformers' Qwen2-VL processors build; ``test_parity`` checks the whole processor against
them), and torch's own ``F.interpolate`` for the resize (``test_fused_vertical``'s helpers).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from vlm_fastpath.imaging.torch_taps import axis_taps, padded_taps
from vlm_fastpath.qwen_integration import patchify_kernel

from .helpers import rand_array
from .test_fused_vertical import _fused_equals_torch, _horizontal_equals_torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="the fast paths are numba kernels",
)

IDENTITY = np.tile(np.arange(256, dtype=np.uint8), (3, 1))


def reference_patches(frame: np.ndarray, lut: np.ndarray, grid_h: int, grid_w: int, p: int,
                      m: int, t: int) -> torch.Tensor:
    """``[patches, 3 * t * p * p]``: each byte through ``lut``, the frame repeated ``t`` times,
    patches in merge order, as transformers lays them out."""
    chw = torch.from_numpy(np.ascontiguousarray(frame[:, :, :3].transpose(2, 0, 1)))
    mapped = torch.stack([torch.from_numpy(lut[c])[chw[c].long()] for c in range(3)])
    tiled = mapped.unsqueeze(0).expand(t, -1, -1, -1)
    blocks = tiled.reshape(t, 3, grid_h // m, m, p, grid_w // m, m, p)
    return blocks.permute(2, 5, 3, 6, 1, 0, 4, 7).reshape(grid_h * grid_w, 3 * t * p * p)


def _frame(layout: str, height: int, width: int, seed: int) -> np.ndarray:
    """HWC uint8 pixels in one of the kernels' source layouts: interleaved RGB, Pillow's RGBX
    (4th byte noise, never read) or channel planes behind an HWC view (torch's resize)."""
    rng = np.random.default_rng(seed)
    if layout == "planes":
        return rng.integers(0, 256, (3, height, width), dtype=np.uint8).transpose(1, 2, 0)
    return rng.integers(0, 256, (height, width, 4 if layout == "rgbx" else 3), dtype=np.uint8)


@pytest.mark.parametrize("layout", ["rgb", "rgbx", "planes"])
@pytest.mark.parametrize("p", [1, 2, 7, 14, 15, 16, 17, 31, 32, 33])
def test_identity_copies_equal_the_layout(layout, p):
    """Patch lines shorter than, equal to and longer than one 16-byte copy, the right-edge
    patches (copied byte by byte when 16 samples would read past the row), every temporal
    count, serial and parallel."""
    for m, t, grid_w in ((1, 1, 1), (2, 2, 2), (2, 2, 6), (1, 3, 5), (2, 1, 4)):
        grid_h = 2 * m
        frame = _frame(layout, grid_h * p, grid_w * p, p * 100 + grid_w)
        expected = reference_patches(frame, IDENTITY, grid_h, grid_w, p, m, t)
        for parallel in (False, True):
            got = np.full((grid_h * grid_w, 3 * t * p * p), 7, dtype=np.uint8)
            patchify_kernel.patchify_frame(frame, IDENTITY, got, grid_h, grid_w, p, m, t,
                                           parallel=parallel)
            assert torch.equal(torch.from_numpy(got), expected), (layout, p, m, t, grid_w)


@pytest.mark.parametrize("layout", ["rgb", "rgbx", "planes"])
def test_a_uint8_table_that_is_not_the_identity_is_applied(layout):
    """Only the exact identity is copied: one changed entry, in any channel, goes through the
    table."""
    frame = _frame(layout, 56, 84, 5)
    frame[0, 0, :3] = 200  # every channel holds the changed byte somewhere
    for channel in range(3):
        lut = IDENTITY.copy()
        lut[channel, 200] = 3
        got = np.empty((24, 1176), dtype=np.uint8)
        patchify_kernel.patchify_frame(frame, lut, got, 4, 6, 14, 2, 2)
        assert torch.equal(torch.from_numpy(got), reference_patches(frame, lut, 4, 6, 14, 2, 2))


# Input sizes whose windows, resized to 112 samples, take 2 to 10 taps (padded to one length
# in the horizontal pass; the longest in the vertical one): tiny inputs, an upscale, then ever
# stronger downscales.
SIZES_FOR_TAPS = {2: 2, 3: 3, 4: 60, 5: 114, 6: 141, 7: 169, 8: 197, 9: 225, 10: 253}
OUT = 112  # whole merge blocks of both geometries below


@pytest.mark.parametrize("taps", sorted(SIZES_FOR_TAPS))
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_every_window_length_equals_torch(taps, dtype):
    """Windows of 4 and 5 taps (upscales, scales near 1), 3 and 6-8 (summed as 8, the missing
    taps weighed 0) and the accumulator path around them (2, 9, 10), in both passes."""
    size = SIZES_FOR_TAPS[taps]
    assert padded_taps(size, OUT)[1].shape[1] == taps
    assert int(axis_taps(size, OUT).sizes.max()) == taps
    for rgbx in (False, True):
        _horizontal_equals_torch(rand_array(taps, size, 40), OUT, 1, rgbx)
    for geometry in ((14, 2, 2), (16, 1, 2)):
        grid = OUT // geometry[0]
        _fused_equals_torch(rand_array(taps * 7, size, size), grid, grid, geometry, dtype, 2,
                            taps % 2 == 1)
        _fused_equals_torch(rand_array(taps * 9, size + 5, size), grid, grid, geometry, dtype,
                            1, taps % 2 == 0)
