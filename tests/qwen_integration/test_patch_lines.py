"""The patch writes that stream 16-pixel patches straight from their planes (``_numba_stream.
stream_patch16``: uint8 outputs on whole 64-byte lines), and 14-pixel ones from their lines
(``stream_pieces14``), against the staged writes they replace (the same kernels on an output
that starts off a line), byte for byte. ``test_video_parity`` and ``test_parity`` check both
against transformers (pooled outputs start on a line)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="the patch kernels need numba",
)

IDENTITY = np.tile(np.arange(256, dtype=np.uint8), (3, 1))
STREAMED = 4 << 20  # outputs from this size on are streamed (_numba_stream.STREAM_MIN_BYTES)


def _outputs(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Two uint8 buffers of ``nbytes``: one on a 64-byte line, one 16 bytes past one."""
    out = []
    for past in (0, 16):
        raw = np.full(nbytes + 128, 9, np.uint8)
        start = -raw.ctypes.data % 64 + past
        out.append(raw[start:start + nbytes])
    assert out[0].ctypes.data % 64 == 0 and out[1].ctypes.data % 64 == 16
    return out[0], out[1]


def test_video_group_rows_stream_as_staged():
    from vlm_fastpath.imaging._numba_bytes import VECTOR
    from vlm_fastpath.qwen_integration import _numba_video as kernels

    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=25, deadline=None, derandomize=True)
    @hypothesis.given(grid_h=st.integers(1, 4), blocks=st.integers(1, 20),
                      geometry=st.sampled_from([(2, 2), (1, 2), (2, 1), (2, 3)]),
                      frames=st.integers(1, 3), seed=st.integers(0, 2**16))
    def check(grid_h, blocks, geometry, frames, seed):
        m, t = geometry
        nf = min(frames, t)
        grid_w = blocks * m
        grid_h = grid_h * m
        p = 16
        rng = np.random.default_rng(seed)
        buf = rng.integers(0, 256, (nf, 3, p, grid_w * p), dtype=np.uint8)
        per_patch = 3 * t * p * p
        lined, offset = _outputs(grid_h * grid_w * per_patch)
        stage = np.empty((m * per_patch + VECTOR + 7) // 8 * 8, np.uint8)
        for flat in (lined, offset):
            for gy in range(grid_h):
                kernels._write_group_patch_row(buf, nf, IDENTITY, flat, stage, gy, grid_w, p, m,
                                               t, True, True)
        assert np.array_equal(lined, offset)

    check()


def test_video_block_rows_of_14_pixel_patches_as_staged():
    """``_write_block_row`` (runs of merge blocks of 14-pixel patches streamed from their
    14-byte lines by ``stream_pieces14``) against the staged rows of
    ``_write_group_patch_row``: outputs on a line, 16 and 32 bytes past one (32: every other
    block on a line), block rows of an odd number of blocks (every other block row off a
    line), and rows that end 0 to 2 bytes after the last patch (its 16-byte reads would pass
    the row's end: staged instead)."""
    from vlm_fastpath.imaging._numba_bytes import VECTOR
    from vlm_fastpath.qwen_integration import _numba_video as kernels

    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    p = 14

    @hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
    @hypothesis.given(block_rows=st.integers(1, 3), blocks=st.integers(1, 9),
                      geometry=st.sampled_from([(2, 2), (1, 2), (2, 1)]),
                      frames=st.integers(1, 2), pad=st.sampled_from([0, 1, 2, 3, 16, 40]),
                      seed=st.integers(0, 2**16))
    def check(block_rows, blocks, geometry, frames, pad, seed):
        m, t = geometry
        nf = min(frames, t)
        grid_w = blocks * m
        grid_h = block_rows * m
        run = kernels._block_run(p, m, t)
        assert run > 0
        rng = np.random.default_rng(seed)
        buf = rng.integers(0, 256, (nf, 3, m * p, grid_w * p + pad), dtype=np.uint8)
        pieces = kernels._block_pieces(buf, nf, run, p, m, t)
        per_patch = 3 * t * p * p
        nbytes = grid_h * grid_w * per_patch
        stage = np.empty((m * per_patch + VECTOR + 7) // 8 * 8, np.uint8)
        expected = np.zeros(nbytes, np.uint8)
        for gy in range(grid_h):
            dy = gy % m
            kernels._write_group_patch_row(buf[:, :, dy * p:(dy + 1) * p], nf, IDENTITY,
                                           expected, stage, gy, grid_w, p, m, t, False, True)
        raw = np.full(nbytes + 128, 9, np.uint8)
        for past in (0, 16, 32):
            start = -raw.ctypes.data % 64 + past
            flat = raw[start:start + nbytes]
            flat[:] = 9
            for gy0 in range(0, grid_h, m):
                kernels._write_block_row(buf, nf, IDENTITY, flat, stage, pieces, run, gy0,
                                         grid_w, p, m, t, True, True)
            assert np.array_equal(flat, expected), (past, m, t, nf, blocks, pad)

    check()


@pytest.mark.parametrize("geometry", [(2, 2), (1, 3), (2, 1)])
def test_image_patch_rows_stream_as_staged(geometry):
    from vlm_fastpath.qwen_integration import _numba_patchify as kernels

    m, t = geometry
    p, grid_h, grid_w = 16, 64, 48 * m
    per_patch = 3 * t * p * p
    assert grid_h * grid_w * per_patch >= STREAMED
    planes = np.random.default_rng(t).integers(0, 256, (3, grid_h * p, grid_w * p),
                                               dtype=np.uint8)
    lined, offset = _outputs(grid_h * grid_w * per_patch)
    for flat in (lined, offset):
        kernels.patchify_serial(planes, True, 3, IDENTITY, flat.reshape(-1, per_patch), grid_w,
                                p, m, t)
    assert np.array_equal(lined, offset)
    # and against numpy's layout of the same patches
    from vlm_fastpath.qwen_integration.patchify_kernel import patchify_numpy

    expected = np.empty((grid_h * grid_w, per_patch), np.uint8)
    patchify_numpy(np.ascontiguousarray(planes.transpose(1, 2, 0)), IDENTITY, expected, grid_h,
                   grid_w, p, m, t)
    assert np.array_equal(lined.reshape(-1, per_patch), expected)
