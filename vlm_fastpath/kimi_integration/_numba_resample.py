"""numba kernels of the Pillow-exact resampler; imported lazily by :mod:`.resample` only.

One call fills the patches of a band of patch rows: the two 8-bit passes of Pillow's
resampler (same integer weights, same int32 sums started at ``1 << 21``, same shift and clamp),
then the normalize table and the patch-major write, row by row. The resized image is never
stored: each output row lives in a small row buffer until its bytes reach their patches.

Horizontal-first bands keep the horizontal pass's rows in a ring of ``max(count) + 1`` lines
(the vertical taps of one output row, plus one: rows are resampled in pairs), so each source
row is resampled once per band and the ring stays in L1/L2. Vertical-first bands (Pillow's
newer pass order) need two lines only.

The kernels are serial and release the GIL (``nogil``); :mod:`.resample` spreads bands over
its own threads, so numba's threading layers (workqueue/OpenMP, with their concurrency and
fork hazards) are never involved.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_SHIFT = 22  # PRECISION_BITS of Pillow's Resample.c
_HALF = 1 << (_SHIFT - 1)


@njit(cache=True, nogil=True)
def _clip8(value):  # noqa: ANN001, ANN202
    value >>= _SHIFT
    if value < 0:
        return 0
    if value > 255:
        return 255
    return value


# Index arithmetic is unsigned (np.uint64) in the horizontal pass: numba then skips its
# negative-index wraparound test on every load, which made this pass ~1.5x slower.
_ONE = np.uint64(1)
_TWO = np.uint64(2)
_THREE = np.uint64(3)


@njit(cache=True, nogil=True)
def _horizontal(line, xmin, xcnt, xw, dst):  # noqa: ANN001, ANN202
    """One row of the horizontal pass: ``line`` (W*3 bytes) -> ``dst`` (ow*3 bytes)."""
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        s0 = np.int64(_HALF)
        s1 = s0
        s2 = s0
        base = np.uint64(xmin[x]) * _THREE
        count = np.uint64(xcnt[x])
        k = np.uint64(0)
        while k < count:
            w = np.int64(xw[x, k])
            s0 += np.int64(line[base]) * w
            s1 += np.int64(line[base + _ONE]) * w
            s2 += np.int64(line[base + _TWO]) * w
            base += _THREE
            k += _ONE
        o = x * _THREE
        dst[o] = _clip8(s0)
        dst[o + _ONE] = _clip8(s1)
        dst[o + _TWO] = _clip8(s2)


@njit(cache=True, nogil=True)
def _horizontal2(line0, line1, xmin, xcnt, xw, dst0, dst1):  # noqa: ANN001, ANN202
    """Two rows at once: each weight is loaded once for six sums (~1.5x faster per row)."""
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        s0 = np.int64(_HALF)
        s1 = s0
        s2 = s0
        t0 = s0
        t1 = s0
        t2 = s0
        base = np.uint64(xmin[x]) * _THREE
        count = np.uint64(xcnt[x])
        k = np.uint64(0)
        while k < count:
            w = np.int64(xw[x, k])
            s0 += np.int64(line0[base]) * w
            s1 += np.int64(line0[base + _ONE]) * w
            s2 += np.int64(line0[base + _TWO]) * w
            t0 += np.int64(line1[base]) * w
            t1 += np.int64(line1[base + _ONE]) * w
            t2 += np.int64(line1[base + _TWO]) * w
            base += _THREE
            k += _ONE
        o = x * _THREE
        dst0[o] = _clip8(s0)
        dst0[o + _ONE] = _clip8(s1)
        dst0[o + _TWO] = _clip8(s2)
        dst1[o] = _clip8(t0)
        dst1[o + _ONE] = _clip8(t1)
        dst1[o + _TWO] = _clip8(t2)


@njit(cache=True, nogil=True)
def _compact(line, cs, dst):  # noqa: ANN001, ANN202
    """RGB(X) row -> RGB row. The strides are constants inside each branch: a stride known
    only at run time made the passes that read it ~2x slower."""
    if cs == 4:
        for x in range(dst.shape[0] // 3):
            dst[3 * x] = line[4 * x]
            dst[3 * x + 1] = line[4 * x + 1]
            dst[3 * x + 2] = line[4 * x + 2]
    else:
        for j in range(dst.shape[0]):
            dst[j] = line[j]


@njit(cache=True, nogil=True)
def _vertical(lines, first, count, weights, ring, acc, dst):  # noqa: ANN001, ANN202
    """One output row of the vertical pass over rows ``first .. first+count`` of ``lines``
    (slot ``row % ring`` when ``ring`` > 0): vectorized across the row's bytes."""
    n = dst.shape[0]
    for j in range(n):
        acc[j] = _HALF
    for k in range(count):
        w = np.int32(weights[k])
        row = first + k
        line = lines[row % ring] if ring > 0 else lines[row]
        for j in range(n):
            acc[j] += w * np.int32(line[j])
    for j in range(n):
        v = acc[j] >> _SHIFT
        dst[j] = 0 if v < 0 else (255 if v > 255 else v)


@njit(cache=True, nogil=True)
def _emit_row(row, y, width, lut, out, grid_w, p):  # noqa: ANN001, ANN202
    """Write output row ``y`` (``width`` RGB pixels) into its patches, padded on the right."""
    gy = y // p
    py = y - gy * p
    base = gy * grid_w
    for gx in range(grid_w):
        x0 = gx * p
        idx = base + gx
        if x0 + p <= width:
            for c in range(3):
                table = lut[c]
                dst = out[idx, c, py]
                src = 3 * x0 + c
                for px in range(p):
                    dst[px] = table[row[src]]
                    src += 3
        else:
            for c in range(3):
                table = lut[c]
                dst = out[idx, c, py]
                for px in range(p):
                    x = x0 + px
                    dst[px] = table[row[3 * x + c]] if x < width else table[0]


@njit(cache=True, nogil=True)
def _emit_pad_row(y, lut, out, grid_w, p):  # noqa: ANN001, ANN202
    gy = y // p
    py = y - gy * p
    for gx in range(grid_w):
        idx = gy * grid_w + gx
        for c in range(3):
            value = lut[c, 0]
            dst = out[idx, c, py]
            for px in range(p):
                dst[px] = value


@njit(cache=True, nogil=True)
def resize_patchify_band(  # noqa: ANN201, PLR0913
    src, cs, xmin, xcnt, xw, ymin, ycnt, yw, need_h, need_v, vertical_first,
    lut, out, grid_w, p, g0, g1,  # noqa: ANN001
):
    """Patch rows ``g0 .. g1`` of ``out`` from ``src`` (uint8 ``[H, W*cs]``: RGB, or
    Pillow's own RGBX memory when ``cs`` is 4; each row is compacted to RGB as it is read).

    ``need_h``/``need_v``: whether each pass runs (its coefficients are ignored otherwise);
    ``vertical_first``: Pillow's pass order for this size and Pillow version.
    """
    height = src.shape[0]
    out_w = xmin.shape[0] if need_h else src.shape[1] // cs
    out_h = ymin.shape[0] if need_v else height
    n = out_w * 3
    y0 = g0 * p
    y_end = g1 * p
    y1 = min(y_end, out_h)
    row = np.empty(n, np.uint8)
    row2 = np.empty(n, np.uint8)
    in3 = src.shape[1] // cs * 3  # bytes of one source row as RGB
    line = np.empty(in3, np.uint8)
    line2 = np.empty(in3, np.uint8)
    if need_v and need_h and vertical_first:
        wide = np.empty(src.shape[1], np.uint8)
        acc = np.empty(src.shape[1], np.int32)
        for y in range(y0, y1, 2):
            _vertical(src, ymin[y], ycnt[y], yw[y], 0, acc, wide)
            _compact(wide, cs, line)
            if y + 1 < y1:
                _vertical(src, ymin[y + 1], ycnt[y + 1], yw[y + 1], 0, acc, wide)
                _compact(wide, cs, line2)
                _horizontal2(line, line2, xmin, xcnt, xw, row, row2)
                _emit_row(row, y, out_w, lut, out, grid_w, p)
                _emit_row(row2, y + 1, out_w, lut, out, grid_w, p)
            else:
                _horizontal(line, xmin, xcnt, xw, row)
                _emit_row(row, y, out_w, lut, out, grid_w, p)
    elif need_v and need_h and y0 < y1:
        taps = 1
        for y in range(y0, y1):
            taps = max(taps, ycnt[y])
        slots = taps + 1  # rows are resampled in pairs: one may run a row ahead
        ring = np.empty((slots, n), np.uint8)
        acc = np.empty(n, np.int32)
        done = ymin[y0]  # next source row to resample horizontally
        for y in range(y0, y1):
            stop = ymin[y] + ycnt[y]
            while done < stop:
                _compact(src[done], cs, line)
                if done + 1 < height:
                    _compact(src[done + 1], cs, line2)
                    _horizontal2(line, line2, xmin, xcnt, xw,
                                 ring[done % slots], ring[(done + 1) % slots])
                    done += 2
                else:
                    _horizontal(line, xmin, xcnt, xw, ring[done % slots])
                    done += 1
            _vertical(ring, ymin[y], ycnt[y], yw[y], slots, acc, row)
            _emit_row(row, y, out_w, lut, out, grid_w, p)
    elif need_v:
        wide = np.empty(src.shape[1], np.uint8)
        acc = np.empty(src.shape[1], np.int32)
        for y in range(y0, y1):
            _vertical(src, ymin[y], ycnt[y], yw[y], 0, acc, wide)
            _compact(wide, cs, row)
            _emit_row(row, y, out_w, lut, out, grid_w, p)
    elif need_h:
        for y in range(y0, y1, 2):
            _compact(src[y], cs, line)
            if y + 1 < y1:
                _compact(src[y + 1], cs, line2)
                _horizontal2(line, line2, xmin, xcnt, xw, row, row2)
                _emit_row(row, y, out_w, lut, out, grid_w, p)
                _emit_row(row2, y + 1, out_w, lut, out, grid_w, p)
            else:
                _horizontal(line, xmin, xcnt, xw, row)
                _emit_row(row, y, out_w, lut, out, grid_w, p)
    else:
        for y in range(y0, y1):
            _compact(src[y], cs, row)
            _emit_row(row, y, out_w, lut, out, grid_w, p)
    for y in range(max(y0, out_h), y_end):
        _emit_pad_row(y, lut, out, grid_w, p)
