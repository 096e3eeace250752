"""The numba building blocks shared by the Kimi and Qwen kernels: streaming copies and int32
steps, against numpy's own copy and Python's integer arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

numba = pytest.importorskip("numba")

from vlm_fastpath.imaging._numba_int32 import mad32, shift_to_byte  # noqa: E402
from vlm_fastpath.imaging._numba_stream import LINE, store_fence, stream_copy  # noqa: E402

DTYPES = [np.uint8, np.float32, np.int32, np.float64]


@numba.njit
def _copy(dst, d, src, s, n, stream):  # noqa: ANN001, ANN202
    stream_copy(dst, d, src, s, n, stream)
    store_fence()


@settings(max_examples=400, deadline=None)
@given(dtype=st.sampled_from(DTYPES), size=st.integers(1, 700), pad=st.integers(0, 200),
       data=st.data(), stream=st.booleans())
def test_stream_copy_is_a_slice_assignment(dtype: type, size: int, pad: int, data: st.DataObject,
                                           stream: bool) -> None:
    """Every head / whole-line / tail split (offsets 0..200 move the destination across
    64-byte lines), both modes: exactly ``dst[d:d+n] = src[s:s+n]``, nothing else touched."""
    rng = np.random.default_rng(size * 1009 + pad)
    src = rng.integers(0, 250, size).astype(dtype)
    dst = np.full(size + pad, 251, dtype)
    d = data.draw(st.integers(0, pad))
    s = data.draw(st.integers(0, size - 1))
    n = data.draw(st.integers(0, size - s))
    want = dst.copy()
    want[d:d + n] = src[s:s + n]
    _copy(dst, d, src, s, n, stream)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stream_copy_large_and_line_aligned(dtype: type) -> None:
    """A copy of many whole lines from a line-aligned start, and one from one element past it."""
    item = np.dtype(dtype).itemsize
    raw = np.zeros(200_000 + LINE, dtype)
    first = (-raw.ctypes.data % LINE) // item  # the first element on a line boundary
    src = np.random.default_rng(1).integers(0, 250, 150_000).astype(dtype)
    for start in (first, first + 1):
        dst = raw.copy()
        want = dst.copy()
        want[start:start + src.size] = src
        _copy(dst, start, src, 0, src.size, True)
        np.testing.assert_array_equal(dst, want)


@numba.njit
def _mad_all(acc, w, s):  # noqa: ANN001, ANN202
    out = np.empty(acc.shape[0], np.int32)
    for i in range(acc.shape[0]):
        out[i] = mad32(acc[i], w[i], s[i])
    return out


@numba.njit
def _shift_all(v, sh):  # noqa: ANN001, ANN202
    out = np.empty(v.shape[0], np.uint8)
    for i in range(v.shape[0]):
        out[i] = shift_to_byte(v[i], sh)
    return out


def test_mad32_is_int32_multiply_add_of_an_unsigned_byte() -> None:
    rng = np.random.default_rng(2)
    acc = rng.integers(-(1 << 30), 1 << 30, 20_000).astype(np.int32)
    w = rng.integers(-(1 << 22), 1 << 22, 20_000).astype(np.int32)
    s = rng.integers(0, 256, 20_000).astype(np.uint8)  # bytes >= 128: zero-, not sign-extended
    want = [(int(a) + int(x) * int(b) + (1 << 31)) % (1 << 32) - (1 << 31)
            for a, x, b in zip(acc, w, s, strict=True)]  # int32 wraparound, like C
    np.testing.assert_array_equal(_mad_all(acc, w, s), np.array(want, np.int32))


@pytest.mark.parametrize("shift", [7, 14, 22])
def test_shift_to_byte_is_arithmetic_shift_and_clamp(shift: int) -> None:
    v = np.concatenate([np.arange(-(1 << 10), 1 << 10),
                        np.random.default_rng(shift).integers(-(1 << 31), (1 << 31) - 1, 20_000),
                        [-(1 << 31), (1 << 31) - 1, 255 << shift, (256 << shift) - 1,
                         256 << shift, -1]]).astype(np.int32)
    want = np.clip(v.astype(np.int64) >> shift, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(_shift_all(v, np.int32(shift)), want)


def test_transpose8_is_an_8x8_byte_transpose() -> None:
    from vlm_fastpath.imaging._numba_bytes import transpose8

    @numba.njit
    def run(src, dst, order):  # noqa: ANN001, ANN202
        s = np.uint64(src.ctypes.data)
        d = np.uint64(dst.ctypes.data)
        e = np.uint64(src.shape[1])
        f = np.uint64(8) * order.astype(np.uint64)
        transpose8(s, s + e, s + 2 * e, s + 3 * e, s + 4 * e, s + 5 * e, s + 6 * e, s + 7 * e,
                   d + f[0], d + f[1], d + f[2], d + f[3], d + f[4], d + f[5], d + f[6], d + f[7])

    rng = np.random.default_rng(8)
    src = rng.integers(0, 256, (8, 11), np.uint8)[:, 1:9]  # unaligned rows, row stride 11
    src = np.ascontiguousarray(src)
    dst = np.zeros((8, 8), np.uint8)
    run(src, dst, np.arange(8))
    assert np.array_equal(dst, src.T)
    dst[:] = 0
    run(src, dst, np.array([7, 6, 5, 4, 3, 2, 1, 0]))
    assert np.array_equal(dst, src.T[::-1])


def _columns_reference(src: np.ndarray, cs: int, first: int, count: int, stride: int):
    """Byte r of column j at [j * stride + r]: rows first.. (the last one repeated to stride)."""
    rows = src[[min(first + r, first + count - 1) for r in range(stride)]]
    width = src.shape[1] // cs
    rgb = rows.reshape(stride, width, cs)[:, :, :3].reshape(stride, 3 * width)
    return np.ascontiguousarray(rgb.T).reshape(-1)


@settings(max_examples=150, deadline=None)
@given(width=st.integers(1, 45), cs=st.sampled_from([3, 4]), count=st.integers(1, 64),
       first=st.integers(0, 5), strided=st.booleans())
def test_gather_and_scatter_are_each_others_transpose(width: int, cs: int, count: int,
                                                      first: int, strided: bool) -> None:
    """The horizontal pass's transposes (8x8 vector blocks plus byte tails, RGB and RGBX, a
    source whose bytes are not adjacent): column-major as numpy transposes it, and back into
    channel planes and ring rows, padding rows only into the spare line."""
    rng = np.random.default_rng(width * 131 + count * 7 + cs)
    src = rng.integers(0, 256, (first + count, width * cs * (2 if strided else 1)), np.uint8)
    if strided:
        src = src[:, ::2]
    _check_transposes(src, cs, first, count, 3)


def _check_transposes(src: np.ndarray, cs: int, first: int, count: int, extra: int) -> None:
    """Rows ``first ..`` of ``src`` column-major as numpy transposes them, and back into
    channel planes and ring rows (``extra`` slots more than rows), padding rows only into
    the spare line."""
    from vlm_fastpath.imaging._numba_resample import (
        _gather_columns,
        _scatter_planes,
        _scatter_rows,
    )

    height = first + count
    width = src.shape[1] // cs
    stride = (count + 7) // 8 * 8
    cols = np.zeros(3 * width * stride // 8, np.uint64)
    _gather_columns(src, cs, first, count, stride, cols)
    assert np.array_equal(cols.view(np.uint8), _columns_reference(src, cs, first, count, stride))

    slots = height + extra
    planes = np.full((3, slots, width), 7, np.uint8)
    spare = np.zeros(width, np.uint8)
    _scatter_planes(cols, stride, first, count, planes, slots, spare)
    rgb = src.reshape(height, width, cs)[first:, :, :3]
    want = np.full((3, slots, width), 7, np.uint8)
    want[:, first:first + count] = rgb.transpose(2, 0, 1)
    assert np.array_equal(planes, want)

    ring = np.full((slots, 3 * width), 9, np.uint8)
    spare3 = np.zeros(3 * width, np.uint8)
    _scatter_rows(cols, stride, 2, count, ring, slots, spare3)
    want_ring = np.full((slots, 3 * width), 9, np.uint8)
    for r in range(count):
        want_ring[(2 + r) % slots] = rgb[r].reshape(-1)
    assert np.array_equal(ring, want_ring)


@pytest.mark.parametrize(("width", "cs"), [(2048, 4), (2048, 3), (1280, 4), (1036, 3)])
@pytest.mark.parametrize("count", [64, 61, 40, 17])
def test_gather_and_scatter_wide_rows(width: int, cs: int, count: int) -> None:
    """Rows wide enough for the 32-row transposes, at strides that spread over L1 and at
    strides that alias (8192 and 6144 bytes: the 8-row path): the same columns as numpy's,
    and back into planes with the padding rows only in the spare line."""
    from vlm_fastpath.imaging._numba_resample import _spread

    rng = np.random.default_rng(width + count + cs)
    _check_transposes(rng.integers(0, 256, (3 + count, width * cs), np.uint8), cs, 3, count, 5)
    assert not _spread(8192) and not _spread(6144)  # 2048 RGBX / RGB pixels
    assert _spread(11520) and _spread(15360) and _spread(5120) and _spread(3108)


@pytest.mark.parametrize(("height", "width", "out_width"), [
    (64, 3840, 1036),  # 15 taps: two taps per multiply, one whole block
    (150, 3840, 1008),  # 16 taps, two whole blocks and a partial one
    (128, 1280, 1008),  # 6 taps, paired
    (70, 1920, 1288),  # 6 taps, a whole block and a partial one
    (64, 2048, 2044),  # 5 taps: the one-tap sweeps
    (64, 999, 131),  # 17 taps, an odd window
    (64, 640, 1280),  # upscale, 4 taps
])
def test_int16_horizontal_pass_is_torchs(height: int, width: int, out_width: int) -> None:
    """The int16 horizontal pass (``horizontal_planes``: one-tap sweeps and, for windows of
    6 taps or more in whole 64-row blocks, two taps per multiply) against torch's own uint8
    antialiased bicubic resize of the width alone. Column-major always (an empty byte-permute
    table: those have ``tests/imaging/test_byte_gather.py``)."""
    torch = pytest.importorskip("torch")
    from vlm_fastpath.imaging._numba_int16_taps import horizontal_planes
    from vlm_fastpath.imaging.torch_taps import padded_gather, padded_pairs, padded_taps

    rng = np.random.default_rng(width + out_width)
    src = rng.integers(0, 256, (height, width, 3), np.uint8)
    xmin, xw, shift = padded_taps(width, out_width)
    planes = np.zeros((3, height, out_width), np.uint8)
    horizontal_planes(src.reshape(height, width * 3), 3, 0, height, xmin, xw,
                      padded_pairs(width, out_width), padded_gather(width, out_width, 3)[:0],
                      shift, planes)
    want = torch.nn.functional.interpolate(
        torch.from_numpy(src).permute(2, 0, 1)[None], size=(height, out_width), mode="bicubic",
        antialias=True, align_corners=False)[0]
    assert torch.equal(torch.from_numpy(planes), want)


@pytest.mark.parametrize(("height", "out_height", "width"), [
    (2160, 588, 1036),  # 15 taps: two taps per multiply, a last run that overlaps
    (1080, 150, 64),  # 29 taps, a row of exactly one run
    (999, 131, 200),  # 17 taps, odd window
    (720, 560, 1008),  # 6 taps: the in-register sweep
    (300, 290, 40),  # 5 taps, a row shorter than one run
])
def test_int16_vertical_pass_is_torchs(height: int, out_height: int, width: int) -> None:
    """The int16 vertical pass (``vertical_row`` over a ring whose slots wrap) against
    torch's own uint8 antialiased bicubic resize of the height alone."""
    torch = pytest.importorskip("torch")
    from vlm_fastpath.imaging._numba_int16_taps import vertical_row
    from vlm_fastpath.imaging.torch_taps import axis_taps

    rng = np.random.default_rng(height + out_height + width)
    src = rng.integers(0, 256, (height, width), np.uint8)
    taps = axis_taps(height, out_height)
    slots = int(taps.sizes.max()) + 7
    ring = np.zeros((slots, width), np.uint8)
    acc = np.empty(width, np.int32)
    out = np.zeros((out_height, width), np.uint8)
    loaded = 0
    for y in range(out_height):
        stop = int(taps.starts[y] + taps.sizes[y])
        while loaded < stop:  # rows enter the ring as a band would load them
            ring[loaded % slots] = src[loaded]
            loaded += 1
        vertical_row(ring, taps.starts[y], taps.sizes[y], taps.weights[y], taps.pairs[y], slots,
                     acc, out[y], taps.precision)
    want = torch.nn.functional.interpolate(
        torch.from_numpy(src)[None, None], size=(out_height, width), mode="bicubic",
        antialias=True, align_corners=False)[0, 0]
    assert torch.equal(torch.from_numpy(out), want)
