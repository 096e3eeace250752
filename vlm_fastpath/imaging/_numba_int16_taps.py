"""torch's uint8 resize passes with 16-bit multiplies; numba, imported lazily (by
``_numba_patchify`` only).

Why: torch's antialiased uint8 resize weighs each sample with an int16 tap (``torch_taps``);
the shared resampler (``kimi_integration._numba_resample``) serves Pillow's 22-bit taps too, so
it multiplies in int32 (``vpmulld``: two micro-ops, ten cycles of latency on x86). Told that
the weight is a sign-extended int16 and the sample a zero-extended byte, LLVM multiplies with
``vpmaddwd`` (one micro-op) instead. The sums are the same integers (every product and partial
sum fits int32), so the same bytes. Measured on 4-tap sweeps over 192 int32 accumulators, one
thread, same run: 16.4 -> 10.9 ms for 153 M multiply-adds.

The passes keep the shared resampler's shape (column-major row blocks for the horizontal pass,
four taps per sweep, the last fused with the shift and clamp): only the multiply-add differs.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._numba_byte_gather import gather_rows, table_fits
from ._numba_int32 import shift_to_byte
from ._numba_resample import (
    BLOCK_ROWS,
    _gather_columns,
    _scatter_planes,
)
from ._numba_tap_pairs import RUN, columns_paired, vertical_paired

_I32 = ir.IntType(32)
PAIRED_MIN_TAPS = 6  # windows this long go two taps per multiply (``_numba_tap_pairs``)


@intrinsic
def mad16(typingctx, acc, weight, sample):  # noqa: ANN001, ANN202, ARG001
    """``acc + weight * sample`` in int32, ``weight`` an int16 (sign-extended) and ``sample``
    a uint8 (zero-extended): the operand widths let LLVM pick a 16-bit multiply."""
    sig = types.int32(types.int32, types.int16, types.uint8)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        total, w, s = args
        return builder.add(total, builder.mul(builder.sext(w, _I32), builder.zext(s, _I32)))

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _sweep4(acc, l0, l1, l2, l3, w0, w1, w2, w3):  # noqa: ANN001, ANN202, PLR0913
    """``acc += w0*l0 + w1*l1 + w2*l2 + w3*l3`` (int16 weights, int32 sums)."""
    for j in range(acc.shape[0]):
        acc[j] = mad16(mad16(mad16(mad16(acc[j], w0, l0[j]), w1, l1[j]), w2, l2[j]), w3, l3[j])


@njit(cache=True, nogil=True, inline="always")
def _sweep2(acc, l0, l1, w0, w1):  # noqa: ANN001, ANN202
    for j in range(acc.shape[0]):
        acc[j] = mad16(mad16(acc[j], w0, l0[j]), w1, l1[j])


@njit(cache=True, nogil=True, inline="always")
def _finish1(acc, l0, w0, sh, dst):  # noqa: ANN001, ANN202
    """The last tap, the shift and the clamp in one sweep."""
    for j in range(acc.shape[0]):
        dst[j] = shift_to_byte(mad16(acc[j], w0, l0[j]), sh)


@njit(cache=True, nogil=True, inline="always")
def _taps4(l0, l1, l2, l3, w0, w1, w2, w3, half, sh, dst):  # noqa: ANN001, ANN202, PLR0913
    """Four taps, the shift and the clamp in one sweep, the sums in registers."""
    for j in range(dst.shape[0]):
        dst[j] = shift_to_byte(mad16(mad16(mad16(mad16(half, w0, l0[j]), w1, l1[j]), w2, l2[j]),
                                     w3, l3[j]), sh)


@njit(cache=True, nogil=True, inline="always")
def _taps5(l0, l1, l2, l3, l4, w0, w1, w2, w3, w4, half, sh, dst):  # noqa: ANN001, ANN202, PLR0913
    for j in range(dst.shape[0]):
        dst[j] = shift_to_byte(mad16(mad16(mad16(mad16(mad16(half, w0, l0[j]), w1, l1[j]), w2,
                                                  l2[j]), w3, l3[j]), w4, l4[j]), sh)


@njit(cache=True, nogil=True, inline="always")
def _taps6(l0, l1, l2, l3, l4, l5, w0, w1, w2, w3, w4, w5, half, sh, dst):  # noqa: ANN001, ANN202, PLR0913
    """Six taps (a downscale to about 4/5: 1280x720 frames to 1008x560), which the 8-tap
    sweep did with two zero taps: measured on such a frame, one thread, same run, the
    horizontal sweep 0.58 -> 0.44 ms and the vertical pass 0.42 -> 0.33 ms."""
    for j in range(dst.shape[0]):
        total = mad16(mad16(mad16(half, w0, l0[j]), w1, l1[j]), w2, l2[j])
        total = mad16(mad16(mad16(total, w3, l3[j]), w4, l4[j]), w5, l5[j])
        dst[j] = shift_to_byte(total, sh)


@njit(cache=True, nogil=True, inline="always")
def _taps8(l0, l1, l2, l3, l4, l5, l6, l7, w0, w1, w2, w3, w4, w5, w6, w7, half, sh, dst):  # noqa: ANN001, ANN202, PLR0913
    for j in range(dst.shape[0]):
        total = mad16(mad16(mad16(mad16(half, w0, l0[j]), w1, l1[j]), w2, l2[j]), w3, l3[j])
        total = mad16(mad16(mad16(mad16(total, w4, l4[j]), w5, l5[j]), w6, l6[j]), w7, l7[j])
        dst[j] = shift_to_byte(total, sh)


@njit(cache=True, nogil=True, inline="always")
def _weight(weights, k, count):  # noqa: ANN001, ANN202
    """Tap ``k``'s weight as int16, 0 past ``count`` (arithmetic, not a branch: a conditional
    here kept LLVM from vectorizing the sweeps, 4.5x slower)."""
    return np.int16(weights[min(k, count - 1)] * (k < count))


@njit(cache=True, nogil=True, inline="always")
def _in_registers(l0, l1, l2, l3, l4, l5, l6, l7, weights, count, half, sh, dst):  # noqa: ANN001, ANN202, PLR0913
    """``count`` (3 to 8) taps over lines ``l0 ..`` in one sweep, the sums in registers (no
    accumulator row in memory): windows of 3-4 taps (upscales), 5 (scales near 1), 6 (to
    about 4/5) and 7-8 (downscales to about 1/2). Lines past ``count`` repeat a real one
    with weight 0, which adds 0 to every sum: the same integers."""
    w0 = _weight(weights, 0, count)
    w1 = _weight(weights, 1, count)
    w2 = _weight(weights, 2, count)
    w3 = _weight(weights, 3, count)
    if count <= 4:
        _taps4(l0, l1, l2, l3, w0, w1, w2, w3, half, sh, dst)
    elif count == 5:
        _taps5(l0, l1, l2, l3, l4, w0, w1, w2, w3, np.int16(weights[4]), half, sh, dst)
    elif count == 6:
        _taps6(l0, l1, l2, l3, l4, l5, w0, w1, w2, w3, np.int16(weights[4]),
               np.int16(weights[5]), half, sh, dst)
    else:
        _taps8(l0, l1, l2, l3, l4, l5, l6, l7, w0, w1, w2, w3, np.int16(weights[4]),
               np.int16(weights[5]), _weight(weights, 6, count), _weight(weights, 7, count),
               half, sh, dst)


@njit(cache=True, nogil=True, inline="always")
def _finish(acc, sh, dst):  # noqa: ANN001, ANN202
    for j in range(acc.shape[0]):
        dst[j] = shift_to_byte(acc[j], sh)


@njit(cache=True, nogil=True, inline="always")
def _line(cols, o, k, last, span):  # noqa: ANN001, ANN202
    """Tap ``k``'s run of ``span`` column-major bytes from offset ``o`` (the last tap's past
    ``last``: weighed 0 by :func:`_in_registers`)."""
    start = o + min(np.uint64(k), last) * span
    return cols[start:start + span]


@njit(cache=True, nogil=True)
def _columns4(cols, span, xmin, xw, half, sh, out):  # noqa: ANN001, ANN202, PLR0913
    """:func:`horizontal_columns` for windows of 4 taps (upscales), the sums in registers.
    Each window length has its own loop: choosing per output column, in one loop, made
    LLVM's sweeps 4x slower."""
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        _taps4(cols[o:o + span], cols[o + span:o + 2 * span], cols[o + 2 * span:o + 3 * span],
               cols[o + 3 * span:o + 4 * span], np.int16(xw[x, 0]), np.int16(xw[x, 1]),
               np.int16(xw[x, 2]), np.int16(xw[x, 3]), half, sh,
               out[x * span:(x + np.uint64(1)) * span])


@njit(cache=True, nogil=True)
def _columns5(cols, span, xmin, xw, half, sh, out):  # noqa: ANN001, ANN202, PLR0913
    """The same for 5 taps (scales near 1)."""
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        _taps5(cols[o:o + span], cols[o + span:o + 2 * span], cols[o + 2 * span:o + 3 * span],
               cols[o + 3 * span:o + 4 * span], cols[o + 4 * span:o + 5 * span],
               np.int16(xw[x, 0]), np.int16(xw[x, 1]), np.int16(xw[x, 2]), np.int16(xw[x, 3]),
               np.int16(xw[x, 4]), half, sh, out[x * span:(x + np.uint64(1)) * span])


@njit(cache=True, nogil=True)
def _columns6(cols, span, xmin, xw, half, sh, out):  # noqa: ANN001, ANN202, PLR0913
    """The same for 6 taps (downscales to about 4/5)."""
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        _taps6(cols[o:o + span], cols[o + span:o + 2 * span], cols[o + 2 * span:o + 3 * span],
               cols[o + 3 * span:o + 4 * span], cols[o + 4 * span:o + 5 * span],
               cols[o + 5 * span:o + 6 * span], np.int16(xw[x, 0]), np.int16(xw[x, 1]),
               np.int16(xw[x, 2]), np.int16(xw[x, 3]), np.int16(xw[x, 4]), np.int16(xw[x, 5]),
               half, sh, out[x * span:(x + np.uint64(1)) * span])


@njit(cache=True, nogil=True)
def _columns8(cols, span, xmin, xw, half, sh, out):  # noqa: ANN001, ANN202, PLR0913
    """The same for 3, 7 or 8 taps as 8 (the missing ones weighed 0: :func:`_line`)."""
    taps = xw.shape[1]
    last = np.uint64(taps - 1)
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        w = xw[x]
        _taps8(cols[o:o + span], _line(cols, o, 1, last, span), _line(cols, o, 2, last, span),
               _line(cols, o, 3, last, span), _line(cols, o, 4, last, span),
               _line(cols, o, 5, last, span), _line(cols, o, 6, last, span),
               _line(cols, o, 7, last, span), _weight(w, 0, taps), _weight(w, 1, taps),
               _weight(w, 2, taps), _weight(w, 3, taps), _weight(w, 4, taps),
               _weight(w, 5, taps), _weight(w, 6, taps), _weight(w, 7, taps), half, sh,
               out[x * span:(x + np.uint64(1)) * span])


@njit(cache=True, nogil=True)
def horizontal_columns(cols, stride, xmin, xw, xpairs, shift, acc, out):  # noqa: ANN001, ANN201, PLR0913
    """The horizontal pass of ``stride`` column-major rows (the shared resampler's
    ``_horizontal_columns``, int16 taps ``xw``): output column ``3*x + c`` of every row is one
    run of ``stride`` bytes of ``out``. Whole 64-row blocks of windows of 6 taps or more go
    two taps per multiply (``_numba_tap_pairs``, with ``xpairs``: ``torch_taps.tap_pairs``
    of ``xw``)."""
    taps = xw.shape[1]
    sh = np.int32(shift)
    span = np.uint64(3 * stride)
    acc = acc[:span]
    half = np.int32(1 << (shift - 1))
    if (taps >= PAIRED_MIN_TAPS and span % np.uint64(RUN) == 0
            and xpairs.shape[1] >= (taps + 1) // 2 and xpairs.strides[1] == 4):
        columns_paired(cols, span, xmin, xpairs, taps, half, sh, out)
        return
    if taps == 4:
        _columns4(cols, span, xmin, xw, half, sh, out)
        return
    if taps == 5:
        _columns5(cols, span, xmin, xw, half, sh, out)
        return
    if taps == 6:
        _columns6(cols, span, xmin, xw, half, sh, out)
        return
    if 3 <= taps <= 8:
        _columns8(cols, span, xmin, xw, half, sh, out)
        return
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        o = np.uint64(xmin[x]) * span
        acc[:] = half
        k = 0
        while taps - k >= 4:
            _sweep4(acc, cols[o:o + span], cols[o + span:o + 2 * span],
                    cols[o + 2 * span:o + 3 * span], cols[o + 3 * span:o + 4 * span],
                    np.int16(xw[x, k]), np.int16(xw[x, k + 1]), np.int16(xw[x, k + 2]),
                    np.int16(xw[x, k + 3]))
            o += np.uint64(4) * span
            k += 4
        if taps - k >= 2:
            _sweep2(acc, cols[o:o + span], cols[o + span:o + 2 * span], np.int16(xw[x, k]),
                    np.int16(xw[x, k + 1]))
            o += np.uint64(2) * span
            k += 2
        dst = out[x * span:(x + np.uint64(1)) * span]
        if k < taps:
            _finish1(acc, cols[o:o + span], np.int16(xw[x, k]), sh, dst)
        else:
            _finish(acc, sh, dst)


@njit(cache=True, nogil=True)
def vertical_row(lines, first, count, weights, pairs, ring, acc, dst, shift):  # noqa: ANN001, ANN201, PLR0913
    """One output row of the vertical pass over rows ``first .. first+count`` of ``lines``
    (slot ``row % ring`` when ``ring`` > 0), int16 taps ``weights`` (and ``pairs``, their
    ``torch_taps.tap_pairs`` row): the shared resampler's ``_vertical``."""
    n = dst.shape[0]
    sh = np.int32(shift)
    if (count > 8 and ring >= count and n >= RUN and dst.strides[0] == 1
            and lines.strides[1] == 1 and pairs.shape[0] >= (count + 1) // 2
            and pairs.strides[0] == 4):
        vertical_paired(lines, first, count, pairs, ring, dst, shift)
        return
    if 3 <= count <= 8 and ring > 0:
        last = first + count - 1
        _in_registers(lines[first % ring], lines[min(first + 1, last) % ring],
                      lines[min(first + 2, last) % ring], lines[min(first + 3, last) % ring],
                      lines[min(first + 4, last) % ring], lines[min(first + 5, last) % ring],
                      lines[min(first + 6, last) % ring], lines[min(first + 7, last) % ring],
                      weights, count, np.int32(1 << (shift - 1)), sh, dst)
        return
    acc = acc[:n]
    acc[:] = np.int32(1 << (shift - 1))
    k = 0
    while count - k >= 4:
        r = first + k
        if ring > 0:
            _sweep4(acc, lines[r % ring], lines[(r + 1) % ring], lines[(r + 2) % ring],
                    lines[(r + 3) % ring], np.int16(weights[k]), np.int16(weights[k + 1]),
                    np.int16(weights[k + 2]), np.int16(weights[k + 3]))
        else:
            _sweep4(acc, lines[r], lines[r + 1], lines[r + 2], lines[r + 3],
                    np.int16(weights[k]), np.int16(weights[k + 1]), np.int16(weights[k + 2]),
                    np.int16(weights[k + 3]))
        k += 4
    if count - k >= 2:
        r = first + k
        if ring > 0:
            _sweep2(acc, lines[r % ring], lines[(r + 1) % ring], np.int16(weights[k]),
                    np.int16(weights[k + 1]))
        else:
            _sweep2(acc, lines[r], lines[r + 1], np.int16(weights[k]), np.int16(weights[k + 1]))
        k += 2
    if k < count:
        r = first + k
        _finish1(acc, lines[r % ring] if ring > 0 else lines[r], np.int16(weights[k]), sh, dst)
    else:
        _finish(acc, sh, dst)


@njit(cache=True, nogil=True)
def resample_planes(src, cs, first, count, xmin, xw, xpairs, xgather, shift, cols, hcols, acc,  # noqa: ANN001, ANN201, PLR0913
                    planes, slots, spare):
    """The horizontal pass of rows ``first .. first+count`` (at most one block) of ``src``
    into channel planes, ring slot ``row % slots`` (the shared resampler's
    ``resample_planes``, int16 taps): by byte permutes where ``xgather``
    (``byte_gather.gather_table``) has blocks, else column-major."""
    if table_fits(xgather, src, planes):
        gather_rows(src, first, count, xgather, shift, planes, slots)
        return
    stride = (count + 7) // 8 * 8
    _gather_columns(src, cs, first, count, stride, cols)
    horizontal_columns(cols.view(np.uint8), stride, xmin, xw, xpairs, shift, acc,
                       hcols.view(np.uint8))
    _scatter_planes(hcols, stride, first, count, planes, slots, spare)


@njit(cache=True, nogil=True)
def column_scratch(src, cs, xgather, planes):  # noqa: ANN001, ANN201
    """``(cols, hcols)``: the column-major pass's scratch for rows of ``src`` into
    ``planes``, empty where the byte permutes serve them (``table_fits``)."""
    if table_fits(xgather, src, planes):
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    width = src.shape[1] // cs
    return (np.empty(width * 3 * BLOCK_ROWS // 8, np.uint64),
            np.empty(planes.shape[2] * 3 * BLOCK_ROWS // 8, np.uint64))


@njit(cache=True, nogil=True)
def horizontal_planes(src, cs, first, stop, xmin, xw, xpairs, xgather, shift, planes):  # noqa: ANN001, ANN201, PLR0913
    """The horizontal pass alone for rows ``first .. stop`` of ``src`` (uint8 ``[H, W*cs]``)
    into the same rows of ``planes`` (uint8 ``[3, H, ow]``), in blocks of ``BLOCK_ROWS``
    (the shared resampler's ``horizontal_planes``, int16 taps)."""
    cols, hcols = column_scratch(src, cs, xgather, planes)
    acc = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(planes.shape[2], np.uint8)
    done = first
    while done < stop:
        count = min(BLOCK_ROWS, stop - done)
        resample_planes(src, cs, done, count, xmin, xw, xpairs, xgather, shift, cols, hcols,
                        acc, planes, planes.shape[1], spare)
        done += count
