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
