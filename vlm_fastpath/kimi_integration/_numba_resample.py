"""numba kernels of the Pillow-exact resampler; imported lazily by :mod:`.resample` only.

One call fills the patches of a band of patch rows: the two 8-bit passes of Pillow's
resampler (same integer weights, same sums started at ``1 << 21``, same shift and clamp),
then the normalize table and the patch-major write, row by row. The resized image is never
stored: each output row lives in a small row buffer until its bytes reach their patches.

Horizontal-first bands keep the horizontal pass's rows in a ring of ``max(count) + 1`` lines
(the vertical taps of one output row, plus one: rows are resampled in pairs), so each source
row is resampled once per band and the ring stays in L1/L2. Vertical-first bands (Pillow's
newer pass order) need two lines only.

Why the horizontal pass looks the way it does (each measured on 2048² -> 1795², same run):
- Two rows share one 64-bit multiply (``_pack``): row 0's byte in the low 32 bits, row 1's in
  the high ones. Each 32-bit sum fits in int32 (Pillow's own accumulator type), so the low
  half of the 64-bit sum is row 0's sum and the rest, shifted down, is row 1's: exact, and
  half the multiplies (scalar multiplies bound this pass; numba runs no SLP vectorizer).
- Every output pixel takes the same number of taps (zero weights pad the shorter windows,
  whose start is moved left at the right edge): a tap count that varies from pixel to pixel
  mispredicts the inner loop's exit.
- Packing also drops Pillow's fourth (X) byte, so RGBX memory needs no separate compaction.
- Index arithmetic is unsigned (np.uint64): numba then skips its negative-index test on every
  load. Mixing np.uint64 with signed ints would make numba compute in float64, so every
  constant in those expressions is np.uint64 too.
The patch write indexes one flat view of the output the same way (2x faster than a view per
patch row).

The kernels are serial and release the GIL (``nogil``); :mod:`.resample` spreads bands over
its own threads, so numba's threading layers (workqueue/OpenMP, with their concurrency and
fork hazards) are never involved.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_SHIFT = 22  # PRECISION_BITS of Pillow's Resample.c
_HALF = 1 << (_SHIFT - 1)
_HALF2 = np.int64(_HALF + (_HALF << 32))  # the rounding half in both packed sums
_LOW32 = np.int64(0xFFFFFFFF)

_ONE = np.uint64(1)
_TWO = np.uint64(2)
_THREE = np.uint64(3)


@njit(cache=True, nogil=True)
def _clip8(value):  # noqa: ANN001, ANN202
    value >>= _SHIFT
    if value < 0:
        return 0
    if value > 255:
        return 255
    return value


@njit(cache=True, nogil=True)
def _unpack(total):  # noqa: ANN001, ANN202
    """(row 0, row 1) clamped bytes of one packed 64-bit sum."""
    low = np.int64(np.int32(total & _LOW32))  # row 0's int32 sum, sign restored
    return _clip8(low), _clip8((total - low) >> 32)


@njit(cache=True, nogil=True)
def _pack(line0, line1, cs, packed):  # noqa: ANN001, ANN202
    """``packed[j] = line0[j] | line1[j] << 32`` over the RGB bytes of two RGB(X) rows. The
    strides are constants inside each branch: a stride known only at run time made the
    loops that read it ~2x slower."""
    if cs == 4:
        for x in range(packed.shape[0] // 3):
            packed[3 * x] = np.int64(line0[4 * x]) | (np.int64(line1[4 * x]) << 32)
            packed[3 * x + 1] = np.int64(line0[4 * x + 1]) | (np.int64(line1[4 * x + 1]) << 32)
            packed[3 * x + 2] = np.int64(line0[4 * x + 2]) | (np.int64(line1[4 * x + 2]) << 32)
    else:
        for j in range(packed.shape[0]):
            packed[j] = np.int64(line0[j]) | (np.int64(line1[j]) << 32)


@njit(cache=True, nogil=True)
def _horizontal(packed, xmin, xw, dst0, dst1):  # noqa: ANN001, ANN202
    """The horizontal pass of two packed rows: ``dst0``/``dst1`` get ``ow*3`` bytes each.
    ``xw`` is ``[ow, taps]`` int64, zero-padded; ``xmin`` already moved for the padding."""
    taps = np.uint64(xw.shape[1])
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        s0 = _HALF2
        s1 = _HALF2
        s2 = _HALF2
        base = np.uint64(xmin[x]) * _THREE
        k = np.uint64(0)
        while k < taps:
            w = xw[x, k]
            s0 += packed[base] * w
            s1 += packed[base + _ONE] * w
            s2 += packed[base + _TWO] * w
            base += _THREE
            k += _ONE
        o = x * _THREE
        a, b = _unpack(s0)
        dst0[o] = a
        dst1[o] = b
        a, b = _unpack(s1)
        dst0[o + _ONE] = a
        dst1[o + _ONE] = b
        a, b = _unpack(s2)
        dst0[o + _TWO] = a
        dst1[o + _TWO] = b


@njit(cache=True, nogil=True)
def _compact(line, cs, dst):  # noqa: ANN001, ANN202
    """RGB(X) row -> RGB row (strides constant per branch, as in :func:`_pack`)."""
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
def _emit_patch_row(rows, gy, width, lut, flat, grid_w, p):  # noqa: ANN001, ANN202
    """Write patch row ``gy`` from its ``p`` image rows (``rows[r]``: ``width`` RGB pixels;
    zeros for rows below the image) into ``flat``, the output ``[patches, 3, p, p]`` as one
    vector, padded on the right. Patches are written in memory order: one sequential stream
    of stores, ~2x faster than writing row by row into every patch of the row."""
    o = np.uint64(gy * grid_w * 3 * p * p)
    full = min(width // p, grid_w)
    for gx in range(full):
        for c in range(3):
            table = lut[c]
            for py in range(p):
                line = rows[py]
                s = np.uint64(3 * gx * p + c)
                for _px in range(p):
                    flat[o] = table[np.uint64(line[s])]
                    o += _ONE
                    s += _THREE
    for gx in range(full, grid_w):
        for c in range(3):
            table = lut[c]
            for py in range(p):
                for px in range(p):
                    x = gx * p + px
                    flat[o] = table[rows[py, 3 * x + c]] if x < width else table[0]
                    o += _ONE


@njit(cache=True, nogil=True)
def resize_patchify_band(  # noqa: ANN201, PLR0913, PLR0912
    src, cs, xmin, xw, ymin, ycnt, yw, need_h, need_v, vertical_first,
    lut, out, grid_w, p, g0, g1,  # noqa: ANN001
):
    """Patch rows ``g0 .. g1`` of ``out`` from ``src`` (uint8 ``[H, W*cs]``: RGB, or
    Pillow's own RGBX memory when ``cs`` is 4; rows are compacted to RGB as they are read).

    ``xmin``/``xw``: the horizontal taps, padded to one count (:func:`_horizontal`);
    ``ymin``/``ycnt``/``yw``: the vertical ones as Pillow computes them.
    ``need_h``/``need_v``: whether each pass runs (its coefficients are ignored otherwise);
    ``vertical_first``: Pillow's pass order for this size and Pillow version.
    The ``p`` rows of one patch row are made into ``rows``, then written out as patches.
    """
    flat = out.reshape(out.size)
    height = src.shape[0]
    width = src.shape[1] // cs
    out_w = xmin.shape[0] if need_h else width
    out_h = ymin.shape[0] if need_v else height
    n = out_w * 3
    rows = np.empty((p, n), np.uint8)  # rows below the image are zeroed: the padding
    spare = np.empty(n, np.uint8)
    packed = np.empty(width * 3, np.int64)
    wide = np.empty(src.shape[1], np.uint8)
    wide2 = np.empty(src.shape[1], np.uint8)
    ring_mode = need_v and need_h and not vertical_first
    taps = 1
    if ring_mode:
        for y in range(min(g0 * p, out_h), min(g1 * p, out_h)):
            taps = max(taps, ycnt[y])
    slots = taps + 1  # rows are resampled in pairs: one may run a row ahead
    ring = np.empty((slots if ring_mode else 0, n), np.uint8)
    acc = np.empty(max(n, src.shape[1]), np.int32)
    done = ymin[min(g0 * p, out_h - 1)] if ring_mode else 0  # next source row to resample
    for gy in range(g0, g1):
        y0 = gy * p
        count = max(0, min(p, out_h - y0))  # image rows in this patch row
        for r in range(count, p):  # below the image (last patch rows only)
            rows[r, :] = 0
        if ring_mode:
            for r in range(count):
                y = y0 + r
                stop = ymin[y] + ycnt[y]
                while done < stop:
                    if done + 1 < height:
                        _pack(src[done], src[done + 1], cs, packed)
                        _horizontal(packed, xmin, xw, ring[done % slots],
                                    ring[(done + 1) % slots])
                        done += 2
                    else:
                        _pack(src[done], src[done], cs, packed)
                        _horizontal(packed, xmin, xw, ring[done % slots], spare)
                        done += 1
                _vertical(ring, ymin[y], ycnt[y], yw[y], slots, acc, rows[r])
        elif need_h:
            for r in range(0, count, 2):
                y = y0 + r
                pair = r + 1 < count
                if need_v:  # vertical first
                    _vertical(src, ymin[y], ycnt[y], yw[y], 0, acc, wide)
                    if pair:
                        _vertical(src, ymin[y + 1], ycnt[y + 1], yw[y + 1], 0, acc, wide2)
                    _pack(wide, wide2 if pair else wide, cs, packed)
                else:
                    _pack(src[y], src[y + 1] if pair else src[y], cs, packed)
                _horizontal(packed, xmin, xw, rows[r], rows[r + 1] if pair else spare)
        elif need_v:
            for r in range(count):
                y = y0 + r
                _vertical(src, ymin[y], ycnt[y], yw[y], 0, acc, wide)
                _compact(wide, cs, rows[r])
        else:
            for r in range(count):
                _compact(src[y0 + r], cs, rows[r])
        _emit_patch_row(rows, gy, out_w, lut, flat, grid_w, p)
