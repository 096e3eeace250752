"""numba kernels of the Pillow-exact resampler; imported lazily by :mod:`.resample` only.

One call fills the patches of a band of patch rows: the two 8-bit passes of Pillow's
resampler (same integer weights, same sums started at ``1 << 21``, same shift and clamp),
then the normalize table and the patch-major write, row by row. The resized image is never
stored: each output row lives in a small row buffer until its bytes reach their patches.

Horizontal-first bands keep the horizontal pass's rows in a ring of ``max(count) +
BLOCK_ROWS`` lines (the vertical taps of one output row, plus one block made ahead), so each
source row is resampled once per band. Other bands resample the rows of up to ``BLOCK_ROWS //
p`` patch rows at once.

Why the horizontal pass looks the way it does (measured on 2048² -> 1792², one thread, same
run: 22.2 ms for the whole band before, 11.6 ms now):
- It runs on blocks of up to ``BLOCK_ROWS`` rows turned column-major (:func:`_gather_columns`):
  one tap of one output pixel is then a multiply-add over ``3 * rows`` contiguous bytes, which
  numba's loop vectorizer turns into SIMD (numba runs no SLP vectorizer, so a loop across the
  taps or the channels of one row stays scalar). Same int32 sums as Pillow's, so exact.
- The transposes move eight rows per 64-bit word, eight words per 8x8 shuffle network
  (``_numba_bytes.transpose8``); byte by byte they took longer than the whole pass they
  serve, and word by word (eight byte loads or stores per word) still 1.15 of the 1.8 ms
  horizontal pass of a 1280x720 frame (-> 1008 wide, 6 taps, one thread). With the shuffles,
  same run: gather 0.51 -> 0.23 ms, scatter 0.64 -> 0.19 ms, the pass 1.8 -> 1.1 ms.
- Every output pixel takes the same number of taps (zero weights pad the shorter windows,
  whose start is moved left at the right edge), so all windows are one length.
- The gather drops Pillow's fourth (X) byte, so RGBX memory needs no separate compaction.
- Index arithmetic is unsigned (np.uint64): numba then skips its negative-index test on every
  load. Mixing np.uint64 with signed ints would make numba compute in float64, so every
  constant in those expressions is np.uint64 too.
- The weighted sums of both passes are int32 steps (``_numba_int32``; numba would widen them
  to int64 lanes), four taps per sweep over the accumulators, the last tap fused with the
  shift and clamp (:func:`vertical_row`). One 64-row block of 2048 -> 2044 (5 taps), same run:
  126 -> 59 us.
The patch write indexes one flat view of the output the same way (2x faster than a view per
patch row), a few patches at a time into a cache-resident stage that is then streamed out
(``_numba_stream``: large outputs skip the read-for-ownership of ordinary stores).

The kernels are serial and release the GIL (``nogil``); :mod:`.resample` spreads bands over
its own threads, so numba's threading layers (workqueue/OpenMP, with their concurrency and
fork hazards) are never involved.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from ._numba_bytes import (
    WIDE_GROUPS,
    columns_to_rows,
    rgb_rows_to_columns,
    rgbx_rows_to_columns,
    transpose8,
)
from ._numba_int32 import mad32, shift_to_byte
from ._numba_jobs import claim, finish, settle
from ._numba_rows import bytes_at, gather_rows, int32_at, int64_at, items_at
from ._numba_stream import STREAM_MIN_BYTES, store_fence, stream_copy
from .pillow_coeffs import PRECISION_BITS

_SHIFT = PRECISION_BITS  # Pillow's fixed-point precision (Resample.c)
_HALF = 1 << (_SHIFT - 1)

_ONE = np.uint64(1)
_THREE = np.uint64(3)

BLOCK_ROWS = 64  # rows per column-major block of the horizontal pass (a multiple of 8)

_BYTE = np.uint64(255)


@njit(cache=True, nogil=True, inline="always")
def _word(b0, b1, b2, b3, b4, b5, b6, b7):  # noqa: ANN001, ANN202, PLR0913
    """Eight bytes as one little-endian uint64 (``b0`` lowest)."""
    return (np.uint64(b0) | (np.uint64(b1) << np.uint64(8)) | (np.uint64(b2) << np.uint64(16))
            | (np.uint64(b3) << np.uint64(24)) | (np.uint64(b4) << np.uint64(32))
            | (np.uint64(b5) << np.uint64(40)) | (np.uint64(b6) << np.uint64(48))
            | (np.uint64(b7) << np.uint64(56)))

@njit(cache=True, nogil=True, inline="always")
def _spread(row_bytes):  # noqa: ANN001, ANN202
    """True when 32 rows ``row_bytes`` apart fall into at least 4 of the 64 sets of a 4 KiB
    L1 way (``gcd(row_bytes, 4096) <= 1024``: at most 8 rows to an 8-way set), so a wide
    transpose's rows stay in L1 from one chunk to the next. At a stride of 8192 bytes (2048
    RGBX pixels) all 32 share one set: the wide gather took 3.96 ms for a 2048² frame where
    eight rows at a time took 1.67 (2048 RGB pixels, two sets: 1.74 against 1.48)."""
    a = row_bytes
    b = 4096
    while b:
        a, b = b, a % b
    return a <= 1024


@njit(cache=True, nogil=True, inline="always")
def _gather_wide(src, cs, r0, chunks, step, d):  # noqa: ANN001, ANN202, PLR0913
    """Rows ``r0 .. r0 + 8*WIDE_GROUPS`` (all real rows) of the vector part of
    :func:`_gather_columns`: 32 bytes (one per row) stored per column per transpose."""
    base = np.uint64(src[r0].ctypes.data)
    row_bytes = np.uint64(src.strides[0])
    for q in range(chunks):
        s = np.uint64(8 * q)
        if cs == 3:  # columns 8q .. 8q+7
            rgb_rows_to_columns(base + s, row_bytes, d + s * step, step)
        else:  # pixels 2q, 2q+1: columns 6q .. 6q+5, their X bytes dropped
            rgbx_rows_to_columns(base + s, row_bytes, d + np.uint64(6 * q) * step, step)


@njit(cache=True, nogil=True)
def _gather_columns(src, cs, first, count, stride, cols):  # noqa: ANN001, ANN202
    """Rows ``first .. first+count`` of ``src`` turned column-major into ``cols`` (uint64):
    byte ``r`` of column ``j`` (an RGB byte of the row, X dropped) at ``cols8[j*stride + r]``.
    Where the rows' stride spreads them over L1 (:func:`_spread`), thirty-two real rows at a
    time go into four words of each column (``rgb_rows_to_columns``: one 32-byte store per
    column; a 3840x2160 frame 3.8-3.9 -> 2.6 ms, 4032x3024 5.7 -> 4.0, 1280x720 0.28 -> 0.15,
    one thread, same run, where eight rows at a time store 8 bytes per column into a line
    that each of the block's eight groups writes again); the other groups eight rows per
    word, eight columns per 8x8 transpose (``transpose8``; the X words of RGBX go to a
    discarded scratch word); rows past ``count`` (up to ``stride``, a multiple of 8) repeat
    the last one and are never read back."""
    width = src.shape[1] // cs
    groups = stride // 8
    g_stride = np.uint64(groups)
    step = np.uint64(8 * groups)  # bytes from one column's word to the next column's
    last = first + count - 1
    vector = src.strides[1] == 1
    scratch = np.empty(1, np.uint64)
    waste = np.uint64(scratch.ctypes.data)
    chunks = (3 * width) // 8 if cs == 3 else width // 2  # 8 source bytes each
    if not vector:
        chunks = 0
    spread = _spread(src.strides[0])
    wide_until = 0  # groups below this one were moved by ``_gather_wide``
    for g in range(groups):
        r0 = first + 8 * g
        l0 = src[min(r0, last)]
        l1 = src[min(r0 + 1, last)]
        l2 = src[min(r0 + 2, last)]
        l3 = src[min(r0 + 3, last)]
        l4 = src[min(r0 + 4, last)]
        l5 = src[min(r0 + 5, last)]
        l6 = src[min(r0 + 6, last)]
        l7 = src[min(r0 + 7, last)]
        d = np.uint64(cols.ctypes.data) + np.uint64(8 * g)
        if chunks and spread and g >= wide_until and r0 + 8 * WIDE_GROUPS - 1 <= last:
            _gather_wide(src, cs, r0, chunks, step, d)
            wide_until = g + WIDE_GROUPS
        elif chunks and g >= wide_until:
            a0, a1, a2, a3 = (np.uint64(l0.ctypes.data), np.uint64(l1.ctypes.data),
                              np.uint64(l2.ctypes.data), np.uint64(l3.ctypes.data))
            a4, a5, a6, a7 = (np.uint64(l4.ctypes.data), np.uint64(l5.ctypes.data),
                              np.uint64(l6.ctypes.data), np.uint64(l7.ctypes.data))
            for q in range(chunks):
                s = np.uint64(8 * q)
                if cs == 3:  # columns 8q .. 8q+7
                    c0 = d + s * step
                    c4 = c0 + np.uint64(4) * step
                    transpose8(a0 + s, a1 + s, a2 + s, a3 + s, a4 + s, a5 + s, a6 + s, a7 + s,
                               c0, c0 + step, c0 + np.uint64(2) * step, c0 + _THREE * step,
                               c4, c4 + step, c4 + np.uint64(2) * step, c4 + _THREE * step)
                else:  # pixels 2q, 2q+1: columns 6q .. 6q+5, their X bytes to scratch
                    c0 = d + np.uint64(6 * q) * step
                    c3 = c0 + _THREE * step
                    transpose8(a0 + s, a1 + s, a2 + s, a3 + s, a4 + s, a5 + s, a6 + s, a7 + s,
                               c0, c0 + step, c0 + np.uint64(2) * step, waste,
                               c3, c3 + step, c3 + np.uint64(2) * step, waste)
        done = 8 * chunks // cs  # whole pixels moved above
        o = np.uint64(g) + np.uint64(3 * done) * g_stride
        for x in range(done, width):
            # the read stride is a constant in each branch: a stride known only at run
            # time made such loops ~2x slower
            i = np.uint64(x) * np.uint64(4) if cs == 4 else np.uint64(x) * _THREE
            for _c in range(3):
                cols[o] = _word(l0[i], l1[i], l2[i], l3[i], l4[i], l5[i], l6[i], l7[i])
                o += g_stride
                i += _ONE
    # numba frees a local array after its last use in the code; this use keeps the scratch
    # word alive (and owned) for every store through ``waste`` above
    scratch[0] = np.uint64(0)


@njit(cache=True, nogil=True)
def _horizontal_columns(cols, stride, xmin, xw, shift, acc, out):  # noqa: ANN001, ANN202, PLR0913
    """The horizontal pass of ``stride`` rows at once, on column-major bytes (uint8 views
    of :func:`_gather_columns`' layout): output column ``3*x + c`` of every row is one
    contiguous run of ``stride`` bytes, so the three columns of a pixel are one line of
    ``3*stride`` bytes, and each tap is one multiply-add over such a line (all three channels
    of a pixel share the tap's weight), which the loop vectorizer turns into SIMD: the sweeps
    of :func:`vertical_row`. ``shift``: the weights' fixed-point precision (Pillow's 22; torch's
    int16 taps carry their own); each sum starts at half an LSB."""
    taps = xw.shape[1]
    sh = np.int32(shift)
    span = np.uint64(3 * stride)
    acc = acc[:span]
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        acc[:] = np.int32(1 << (shift - 1))
        k = 0
        while taps - k >= 4:
            _sweep4(acc, cols[o:o + span], cols[o + span:o + 2 * span],
                    cols[o + 2 * span:o + 3 * span], cols[o + 3 * span:o + 4 * span],
                    np.int32(xw[x, k]), np.int32(xw[x, k + 1]), np.int32(xw[x, k + 2]),
                    np.int32(xw[x, k + 3]))
            o += np.uint64(4) * span
            k += 4
        if taps - k >= 2:
            _sweep2(acc, cols[o:o + span], cols[o + span:o + 2 * span], np.int32(xw[x, k]),
                    np.int32(xw[x, k + 1]))
            o += np.uint64(2) * span
            k += 2
        dst = out[x * span:(x + _ONE) * span]
        if k < taps:
            _finish1(acc, cols[o:o + span], np.int32(xw[x, k]), sh, dst)
        else:
            _finish(acc, sh, dst)


@njit(cache=True, nogil=True, inline="always")
def _unpack_words(cols, o, step, length, l0, l1, l2, l3, l4, l5, l6, l7, start):  # noqa: ANN001, ANN202, PLR0913
    """Byte ``i`` of words ``cols[o]``, ``cols[o + step]``, ... into ``l<i>[start .. length]``:
    eight words into eight rows per 8x8 transpose (``transpose8``), the rest one word at a
    time. A row may be given more than once (a discarded padding row)."""
    j = start
    if (l0.strides[0] == 1 and l1.strides[0] == 1 and l2.strides[0] == 1
            and l3.strides[0] == 1 and l4.strides[0] == 1 and l5.strides[0] == 1
            and l6.strides[0] == 1 and l7.strides[0] == 1):
        b = np.uint64(8) * step  # bytes from one word to the next
        a = np.uint64(cols.ctypes.data) + np.uint64(8) * o
        q0, q1, q2, q3 = (np.uint64(l0.ctypes.data), np.uint64(l1.ctypes.data),
                          np.uint64(l2.ctypes.data), np.uint64(l3.ctypes.data))
        q4, q5, q6, q7 = (np.uint64(l4.ctypes.data), np.uint64(l5.ctypes.data),
                          np.uint64(l6.ctypes.data), np.uint64(l7.ctypes.data))
        while j + 8 <= length:
            s = a + np.uint64(j) * b
            u = np.uint64(j)
            transpose8(s, s + b, s + np.uint64(2) * b, s + _THREE * b, s + np.uint64(4) * b,
                       s + np.uint64(5) * b, s + np.uint64(6) * b, s + np.uint64(7) * b,
                       q0 + u, q1 + u, q2 + u, q3 + u, q4 + u, q5 + u, q6 + u, q7 + u)
            j += 8
    o += np.uint64(j) * step
    for i in range(j, length):
        w = cols[o]
        o += step
        l0[i] = np.uint8(w & _BYTE)
        l1[i] = np.uint8((w >> np.uint64(8)) & _BYTE)
        l2[i] = np.uint8((w >> np.uint64(16)) & _BYTE)
        l3[i] = np.uint8((w >> np.uint64(24)) & _BYTE)
        l4[i] = np.uint8((w >> np.uint64(32)) & _BYTE)
        l5[i] = np.uint8((w >> np.uint64(40)) & _BYTE)
        l6[i] = np.uint8((w >> np.uint64(48)) & _BYTE)
        l7[i] = np.uint8(w >> np.uint64(56))


@njit(cache=True, nogil=True, inline="always")
def _unpack_wide(cols, o, step, length, rows):  # noqa: ANN001, ANN202
    """The vector part of :func:`_unpack_words` for ``WIDE_GROUPS`` groups at once (words
    ``o .. o + WIDE_GROUPS`` of each column, into the rows whose addresses ``rows`` holds):
    the columns done, a multiple of 8; :func:`_unpack_words` finishes each group's rows from
    there."""
    b = np.uint64(8) * step
    a = np.uint64(cols.ctypes.data) + np.uint64(8) * o
    table = np.uint64(rows.ctypes.data)
    j = 0
    while j + 8 <= length:
        columns_to_rows(a + np.uint64(j) * b, b, table, np.uint64(j))
        j += 8
    return j


@njit(cache=True, nogil=True, inline="always")
def _row_address(lines, row, count, spare, slots):  # noqa: ANN001, ANN202
    """The address of ring row ``row`` (its slot), or of ``spare`` for a padding row."""
    if row < count:
        return np.uint64(lines[row % slots].ctypes.data)
    return np.uint64(spare.ctypes.data)


@njit(cache=True, nogil=True)
def _scatter_rows(cols, stride, first, count, ring, slots, spare):  # noqa: ANN001, ANN202
    """The inverse of :func:`_gather_columns` for the pass's output: row ``first + r`` (for
    ``r < count``) into ring slot ``(first + r) % slots``; the padding rows into ``spare``.
    Whole runs of ``WIDE_GROUPS`` groups move by :func:`_unpack_wide` (32-byte loads per
    column) where the ring's rows are spread over L1 (:func:`_spread`), the rest as
    :func:`_unpack_words` does."""
    n = ring.shape[1]
    groups = stride // 8
    wide = ring.strides[1] == 1 and spare.strides[0] == 1 and _spread(ring.strides[0])
    rows = np.empty(8 * WIDE_GROUPS, np.uint64)
    wide_until = 0
    start = 0
    for g in range(groups):
        r0 = 8 * g
        if g >= wide_until:
            start = 0
            if wide and g + WIDE_GROUPS <= groups:
                for r in range(8 * WIDE_GROUPS):
                    rows[r] = _row_address(ring, first + r0 + r, first + count, spare, slots)
                start = _unpack_wide(cols, np.uint64(g), np.uint64(groups), n, rows)
                wide_until = g + WIDE_GROUPS
        l0 = ring[(first + r0) % slots] if r0 < count else spare
        l1 = ring[(first + r0 + 1) % slots] if r0 + 1 < count else spare
        l2 = ring[(first + r0 + 2) % slots] if r0 + 2 < count else spare
        l3 = ring[(first + r0 + 3) % slots] if r0 + 3 < count else spare
        l4 = ring[(first + r0 + 4) % slots] if r0 + 4 < count else spare
        l5 = ring[(first + r0 + 5) % slots] if r0 + 5 < count else spare
        l6 = ring[(first + r0 + 6) % slots] if r0 + 6 < count else spare
        l7 = ring[(first + r0 + 7) % slots] if r0 + 7 < count else spare
        _unpack_words(cols, np.uint64(g), np.uint64(groups), n, l0, l1, l2, l3, l4, l5, l6, l7,
                      start)
    # keeps the address table alive (and owned) through every store above
    rows[0] = np.uint64(0)


@njit(cache=True, nogil=True)
def _scatter_planes(cols, stride, first, count, planes, slots, spare):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_scatter_rows` into channel planes: byte ``c`` of pixel ``x`` of row ``first + r``
    (``r < count``) to ``planes[c, (first + r) % slots, x]``."""
    width = planes.shape[2]
    groups = stride // 8
    g_stride = np.uint64(3 * groups)
    wide = planes.strides[2] == 1 and spare.strides[0] == 1 and _spread(planes.strides[1])
    rows = np.empty(8 * WIDE_GROUPS, np.uint64)
    wide_until = 0
    starts = np.zeros(3, np.int64)
    for g in range(groups):
        r0 = 8 * g
        for c in range(3):
            plane = planes[c]
            y = first + r0
            if g >= wide_until:
                starts[c] = 0
                if wide and g + WIDE_GROUPS <= groups:
                    for r in range(8 * WIDE_GROUPS):
                        rows[r] = _row_address(plane, y + r, first + count, spare, slots)
                    starts[c] = _unpack_wide(cols, np.uint64(c * groups + g), g_stride, width,
                                             rows)
            l0 = plane[y % slots] if r0 < count else spare
            l1 = plane[(y + 1) % slots] if r0 + 1 < count else spare
            l2 = plane[(y + 2) % slots] if r0 + 2 < count else spare
            l3 = plane[(y + 3) % slots] if r0 + 3 < count else spare
            l4 = plane[(y + 4) % slots] if r0 + 4 < count else spare
            l5 = plane[(y + 5) % slots] if r0 + 5 < count else spare
            l6 = plane[(y + 6) % slots] if r0 + 6 < count else spare
            l7 = plane[(y + 7) % slots] if r0 + 7 < count else spare
            _unpack_words(cols, np.uint64(c * groups + g), g_stride, width, l0, l1, l2, l3, l4,
                          l5, l6, l7, starts[c])
        if g >= wide_until and wide and g + WIDE_GROUPS <= groups:
            wide_until = g + WIDE_GROUPS
    rows[0] = np.uint64(0)


@njit(cache=True, nogil=True)
def _resample_rows(src, cs, first, count, xmin, xw, shift, cols, hcols, acc, ring, slot,  # noqa: ANN001, ANN202, PLR0913
                   slots, spare):
    """The horizontal pass of rows ``first .. first+count`` (at most one block) of ``src``
    into ring slots ``(slot + r) % slots`` (:func:`_scatter_rows`), through the scratch
    ``cols``/``hcols``/``acc``."""
    stride = (count + 7) // 8 * 8
    _gather_columns(src, cs, first, count, stride, cols)
    _horizontal_columns(cols.view(np.uint8), stride, xmin, xw, shift, acc, hcols.view(np.uint8))
    _scatter_rows(hcols, stride, slot, count, ring, slots, spare)


@njit(cache=True, nogil=True)
def resample_planes(src, cs, first, count, xmin, xw, shift, cols, hcols, acc, planes, slots,  # noqa: ANN001, ANN201, PLR0913
                    spare):
    """The same into channel planes (:func:`_scatter_planes`)."""
    stride = (count + 7) // 8 * 8
    _gather_columns(src, cs, first, count, stride, cols)
    _horizontal_columns(cols.view(np.uint8), stride, xmin, xw, shift, acc, hcols.view(np.uint8))
    _scatter_planes(hcols, stride, first, count, planes, slots, spare)


@njit(cache=True, nogil=True)
def horizontal_planes(src, cs, first, stop, xmin, xw, shift, planes):  # noqa: ANN001, ANN201, PLR0913
    """The horizontal pass alone for rows ``first .. stop`` of ``src`` (uint8 ``[H, W*cs]``)
    into the same rows of ``planes`` (uint8 ``[3, H, ow]``), in blocks of ``BLOCK_ROWS``:
    for processors that store the width-resized frame (Qwen's torchvision mode: torch's resize
    has this pass's arithmetic, with its own int16 taps and ``shift``). Planes, because the
    patch writes that follow read each channel's rows contiguously."""
    width = src.shape[1] // cs
    n = planes.shape[2] * 3
    cols = np.empty(width * 3 * BLOCK_ROWS // 8, np.uint64)
    hcols = np.empty(n * BLOCK_ROWS // 8, np.uint64)
    acc = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(planes.shape[2], np.uint8)
    done = first
    while done < stop:
        count = min(BLOCK_ROWS, stop - done)
        resample_planes(src, cs, done, count, xmin, xw, shift, cols, hcols, acc, planes,
                        planes.shape[1], spare)
        done += count


@njit(cache=True, nogil=True)
def _compact(line, cs, dst):  # noqa: ANN001, ANN202
    """RGB(X) row -> RGB row (the read stride a constant per branch, as in
    :func:`_gather_columns`)."""
    if cs == 4:
        for x in range(dst.shape[0] // 3):
            dst[3 * x] = line[4 * x]
            dst[3 * x + 1] = line[4 * x + 1]
            dst[3 * x + 2] = line[4 * x + 2]
    else:
        for j in range(dst.shape[0]):
            dst[j] = line[j]


@njit(cache=True, nogil=True, inline="always")
def _sweep4(acc, l0, l1, l2, l3, w0, w1, w2, w3):  # noqa: ANN001, ANN202, PLR0913
    """``acc += w0*l0 + w1*l1 + w2*l2 + w3*l3`` over ``acc`` (int32; ``_numba_int32``)."""
    for j in range(acc.shape[0]):
        acc[j] = mad32(mad32(mad32(mad32(acc[j], w0, l0[j]), w1, l1[j]), w2, l2[j]), w3, l3[j])


@njit(cache=True, nogil=True, inline="always")
def _sweep2(acc, l0, l1, w0, w1):  # noqa: ANN001, ANN202
    for j in range(acc.shape[0]):
        acc[j] = mad32(mad32(acc[j], w0, l0[j]), w1, l1[j])


@njit(cache=True, nogil=True, inline="always")
def _finish1(acc, l0, w0, sh, dst):  # noqa: ANN001, ANN202
    """The last tap, the shift and the clamp in one sweep."""
    for j in range(acc.shape[0]):
        dst[j] = shift_to_byte(mad32(acc[j], w0, l0[j]), sh)


@njit(cache=True, nogil=True, inline="always")
def _finish(acc, sh, dst):  # noqa: ANN001, ANN202
    for j in range(acc.shape[0]):
        dst[j] = shift_to_byte(acc[j], sh)


@njit(cache=True, nogil=True)
def vertical_row(lines, first, count, weights, ring, acc, dst, shift=_SHIFT):  # noqa: ANN001, ANN202, PLR0913
    """One output row of the vertical pass over rows ``first .. first+count`` of ``lines``
    (slot ``row % ring`` when ``ring`` > 0): the 8-bit passes' sum (half an LSB plus each
    weight times its row, in int32), shifted right by ``shift`` (the weights' precision:
    Pillow's 22; torch's taps carry their own) and clamped, vectorized across the row's
    bytes. Four taps per sweep over ``acc`` (a quarter of its loads and stores), the last
    tap fused with the shift (``_numba_int32``: numba would widen these sums to int64)."""
    n = dst.shape[0]
    sh = np.int32(shift)
    acc = acc[:n]
    acc[:] = np.int32(1 << (shift - 1))
    k = 0
    while count - k >= 4:
        r = first + k
        if ring > 0:
            _sweep4(acc, lines[r % ring], lines[(r + 1) % ring], lines[(r + 2) % ring],
                    lines[(r + 3) % ring], np.int32(weights[k]), np.int32(weights[k + 1]),
                    np.int32(weights[k + 2]), np.int32(weights[k + 3]))
        else:
            _sweep4(acc, lines[r], lines[r + 1], lines[r + 2], lines[r + 3],
                    np.int32(weights[k]), np.int32(weights[k + 1]), np.int32(weights[k + 2]),
                    np.int32(weights[k + 3]))
        k += 4
    if count - k >= 2:
        r = first + k
        if ring > 0:
            _sweep2(acc, lines[r % ring], lines[(r + 1) % ring], np.int32(weights[k]),
                    np.int32(weights[k + 1]))
        else:
            _sweep2(acc, lines[r], lines[r + 1], np.int32(weights[k]), np.int32(weights[k + 1]))
        k += 2
    if k < count:
        r = first + k
        _finish1(acc, lines[r % ring] if ring > 0 else lines[r], np.int32(weights[k]), sh, dst)
    else:
        _finish(acc, sh, dst)


STAGE_PATCHES = 8  # patches made in the cache-resident stage before they are streamed out


@njit(cache=True, nogil=True)
def _emit_patch_row(rows, gy, width, lut, flat, grid_w, p, stage):  # noqa: ANN001, ANN202, PLR0913
    """Write patch row ``gy`` from its ``p`` image rows (``rows[r]``: ``width`` RGB pixels;
    zeros for rows below the image) into ``flat``, the output ``[patches, 3, p, p]`` as one
    vector, padded on the right. Patches are made in memory order (one sequential stream of
    stores, ~2x faster than writing row by row into every patch of the row), a few at a time
    in ``stage`` (:data:`STAGE_PATCHES` of them), then streamed out when the output is large
    (``_numba_stream``). Ends with a store fence."""
    per = 3 * p * p
    chunk = stage.shape[0] // per
    stream = flat.nbytes >= STREAM_MIN_BYTES
    full = min(width // p, grid_w)
    base = gy * grid_w * per
    for c0 in range(0, grid_w, chunk):
        c1 = min(grid_w, c0 + chunk)
        o = np.uint64(0)
        for gx in range(c0, c1):
            if gx < full:
                for c in range(3):
                    table = lut[c]
                    for py in range(p):
                        line = rows[py]
                        s = np.uint64(3 * gx * p + c)
                        for _px in range(p):
                            stage[o] = table[np.uint64(line[s])]
                            o += _ONE
                            s += _THREE
            else:
                for c in range(3):
                    table = lut[c]
                    for py in range(p):
                        for px in range(p):
                            x = gx * p + px
                            stage[o] = table[rows[py, 3 * x + c]] if x < width else table[0]
                            o += _ONE
        stream_copy(flat, base + c0 * per, stage, 0, (c1 - c0) * per, stream)
    store_fence()


@njit(cache=True, nogil=True)
def resize_patchify_band(  # noqa: ANN201, PLR0913, PLR0912
    src, cs, top, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v, vertical_first,
    lut, out, grid_w, p, g0, g1,  # noqa: ANN001
):
    """Patch rows ``g0 .. g1`` of ``out`` from ``src`` (uint8 ``[rows, W*cs]``: RGB, or
    Pillow's own RGBX memory when ``cs`` is 4; rows are compacted to RGB as they are read).

    ``src`` holds source rows ``top .. top + rows`` of an image ``in_h`` rows tall: the whole
    image (``top`` 0), or only the rows this band reads (a strip copied out of Pillow's
    blocks, :func:`.resample.strip_spans`).

    ``xmin``/``xw``: the horizontal taps, padded to one count (:func:`_horizontal_columns`);
    ``ymin``/``ycnt``/``yw``: the vertical ones as Pillow computes them.
    ``need_h``/``need_v``: whether each pass runs (its coefficients are ignored otherwise);
    ``vertical_first``: Pillow's pass order for this size and Pillow version.
    The ``p`` rows of one patch row are made into ``rows``, then written out as patches.
    """
    flat = out.reshape(out.size)
    width = src.shape[1] // cs
    out_w = xmin.shape[0] if need_h else width
    out_h = ymin.shape[0] if need_v else in_h
    n = out_w * 3
    ring_mode = need_v and need_h and not vertical_first
    # Patch rows made at once: one in ring mode (the ring holds the horizontal rows), else
    # enough for a horizontal block of about BLOCK_ROWS rows (1-pixel patches too).
    group = 1 if ring_mode else max(1, BLOCK_ROWS // p)
    rows = np.empty((group * p, n), np.uint8)  # rows below the image are zeroed: the padding
    spare = np.empty(n, np.uint8)
    wide = np.empty(src.shape[1], np.uint8)
    taps = 1
    stop_all = 0  # one past the last source row this band reads
    if ring_mode:
        for y in range(min(g0 * p, out_h), min(g1 * p, out_h)):
            taps = max(taps, ycnt[y])
            stop_all = max(stop_all, ymin[y] + ycnt[y])
    block = BLOCK_ROWS if ring_mode else (group * p + 7) // 8 * 8  # rows per horizontal block
    slots = taps + block  # the rows a vertical tap still needs, plus one block ahead
    ring = np.empty((slots if ring_mode else 0, n), np.uint8)
    cols = np.empty(width * 3 * block // 8 if need_h else 0, np.uint64)
    hcols = np.empty(n * block // 8 if need_h else 0, np.uint64)
    acc_h = np.empty(3 * block, np.int32)
    vrows = np.empty((group * p if need_h and need_v and vertical_first else 0, src.shape[1]),
                     np.uint8)
    acc = np.empty(max(n, src.shape[1]), np.int32)
    stage = np.empty(STAGE_PATCHES * 3 * p * p, out.dtype)
    done = ymin[min(g0 * p, out_h - 1)] if ring_mode else 0  # next source row to resample
    for ga in range(g0, g1, group):
        gb = min(g1, ga + group)
        y0 = ga * p
        made = (gb - ga) * p
        count = max(0, min(made, out_h - y0))  # image rows in these patch rows
        for r in range(count, made):  # below the image (last patch rows only)
            rows[r, :] = 0
        if ring_mode:
            for r in range(count):
                y = y0 + r
                stop = ymin[y] + ycnt[y]
                while done < stop:
                    count_b = min(block, stop_all - done)
                    _resample_rows(src, cs, done - top, count_b, xmin, xw, _SHIFT, cols, hcols,
                                   acc_h, ring, done, slots, spare)
                    done += count_b
                vertical_row(ring, ymin[y], ycnt[y], yw[y], slots, acc, rows[r])
        elif need_h and count > 0:
            if need_v:  # vertical first: these rows' vertical pass, then across them
                for r in range(count):
                    y = y0 + r
                    vertical_row(src, ymin[y] - top, ycnt[y], yw[y], 0, acc, vrows[r])
                _resample_rows(vrows, cs, 0, count, xmin, xw, _SHIFT, cols, hcols, acc_h, rows,
                               0, made, spare)
            else:
                _resample_rows(src, cs, y0 - top, count, xmin, xw, _SHIFT, cols, hcols, acc_h,
                               rows, 0, made, spare)
        elif need_v:
            for r in range(count):
                y = y0 + r
                vertical_row(src, ymin[y] - top, ycnt[y], yw[y], 0, acc, wide)
                _compact(wide, cs, rows[r])
        else:
            for r in range(count):
                _compact(src[y0 + r - top], cs, rows[r])
        for gy in range(ga, gb):
            _emit_patch_row(rows[(gy - ga) * p:(gy - ga + 1) * p], gy, out_w, lut, flat,
                            grid_w, p, stage)


@njit(cache=True, nogil=True)
def resize_patchify_band_jobs(  # noqa: ANN201, PLR0913
    counters, edges, src, cs, top, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v,  # noqa: ANN001
    vertical_first, lut, out, grid_w, p, wait,  # noqa: ANN001
):
    """:func:`resize_patchify_band` over the bands ``edges[j] .. edges[j + 1]`` this thread
    claims from ``counters`` (``_numba_jobs``); with ``wait`` (the caller's thread), then wait
    for the bands other threads claimed. False when another thread failed."""
    bands = edges.shape[0] - 1
    job = claim(counters, bands)
    while job >= 0:
        resize_patchify_band(src, cs, top, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v,
                             vertical_first, lut, out, grid_w, p, edges[job], edges[job + 1])
        finish(counters)
        job = claim(counters, bands)
    return settle(counters, bands, wait)


# Columns of ``resize_patchify_frames_jobs``'s frame table: where each frame's arrays are
# (addresses) and its scalars. A frame read through its row table has ``F_ROWS`` != 0.
(F_SRC, F_SRC_ROWS, F_ROW_BYTES, F_CS, F_IN_H, F_NEED_H, F_NEED_V, F_ORDER, F_GRID_W, F_OUT,
 F_PATCHES, F_ROWS, F_XMIN, F_OUT_W, F_XW, F_TAPS, F_YMIN, F_OUT_H, F_YCNT, F_YW,
 F_YW_COLS) = range(21)
FRAME_COLUMNS = 21


@njit(cache=True, nogil=True)
def resize_patchify_frames_jobs(counters, jobs, frames, strip_bytes, lut, p, wait):  # noqa: ANN001, ANN201, PLR0913
    """:func:`resize_patchify_band` over the frames of one call: each job ``(k, a, b, top,
    bottom)`` of ``jobs`` makes patch rows ``a .. b`` of frame ``k``, whose arrays the row
    ``frames[k]`` gives by address (the caller holds them). A frame held as one array is read
    in place; one in many Pillow blocks (``F_ROWS``: its row table) has source rows
    ``top .. bottom`` copied into this thread's strip first (``strip_bytes`` at most). Nothing
    here holds a Python reference, so the loop's helpers keep none of the call's arrays."""
    n = jobs.shape[0]
    job = claim(counters, n)
    strip = np.empty(strip_bytes if job >= 0 else 0, np.uint8)
    while job >= 0:
        f = frames[jobs[job, 0]]
        a, b, top, bottom = jobs[job, 1], jobs[job, 2], jobs[job, 3], jobs[job, 4]
        row_bytes = f[F_ROW_BYTES]
        xmin = carray(int32_at(f[F_XMIN]), (f[F_OUT_W],))
        xw = carray(int64_at(f[F_XW]), (f[F_OUT_W], f[F_TAPS]))
        ymin = carray(int32_at(f[F_YMIN]), (f[F_OUT_H],))
        ycnt = carray(int32_at(f[F_YCNT]), (f[F_OUT_H],))
        yw = carray(int32_at(f[F_YW]), (f[F_OUT_H], f[F_YW_COLS]))
        out = carray(items_at(f[F_OUT], lut), (f[F_PATCHES], 3, p, p))
        if f[F_ROWS] == 0:
            src = carray(bytes_at(f[F_SRC]), (f[F_SRC_ROWS], row_bytes))
            first = 0
        else:
            rows = carray(int64_at(f[F_ROWS]), (f[F_IN_H],))
            src = strip[: (bottom - top) * row_bytes].reshape((bottom - top, row_bytes))
            gather_rows(rows, top, bottom, src)
            first = top
        resize_patchify_band(src, f[F_CS], first, f[F_IN_H], xmin, xw, ymin, ycnt, yw,
                             f[F_NEED_H] != 0, f[F_NEED_V] != 0, f[F_ORDER] != 0, lut, out,
                             f[F_GRID_W], p, a, b)
        finish(counters)
        job = claim(counters, n)
    return settle(counters, n, wait)
