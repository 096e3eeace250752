"""numba builds of the Qwen-VL patch kernel; imported lazily by ``patchify_kernel`` only.

Own module so that importing the package never imports numba (slow, and numba imported at the
wrong moment has crashed vLLM CPU workers at start-up).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, prange

from vlm_fastpath.imaging._numba_bytes import (
    VECTOR,
    copy16,
    rgb16_0,
    rgb16_1,
    rgb16_2,
    rgbx16_0,
    rgbx16_1,
    rgbx16_2,
)

# torch's passes with its int16 taps (one home for them); ``horizontal_planes`` is looked up
# here by ``patchify_kernel`` like this module's own kernels.
from vlm_fastpath.imaging._numba_int16_taps import (
    column_scratch,
    horizontal_planes,  # noqa: F401
    mad16,
    resample_planes,
    vertical_row,
)
from vlm_fastpath.imaging._numba_int32 import shift_to_byte
from vlm_fastpath.imaging._numba_jobs import claim, finish, settle
from vlm_fastpath.imaging._numba_resample import BLOCK_ROWS
from vlm_fastpath.imaging._numba_rows import bytes_at, int32_at, int64_at, items_at
from vlm_fastpath.imaging._numba_stream import (
    LINE,
    STREAM_MIN_BYTES,
    store_fence,
    stream_copy,
    stream_patch16,
)

_ONE = np.uint64(1)
_THREE = np.uint64(3)
_FOUR = np.uint64(4)


@njit(cache=True, nogil=True, inline="always")
def _write_patch(src, planar, cs, lut, flat, o, y0, x0, p, t):  # noqa: ANN001
    """One output row at flat offset ``o``: the patch whose top-left sample is (y0, x0) of
    ``src``, the frame as uint8 ``[3, H, W]`` planes when ``planar`` (what torch's resize
    returns), else as ``[1, H, W*cs]`` interleaved rows of ``cs`` bytes a pixel (RGB, or
    Pillow's RGBX: the 4th byte is never read). Written in memory order, channel by
    channel: one sequential stream of stores per patch, then the temporal copies as block
    copies. Indices are np.uint64 (numba then skips its negative-index test; every constant in
    them is np.uint64 too, as mixing signed and unsigned makes numba compute in float64); each
    layout (planes, 3 or 4 bytes a pixel) has its own loop, so the read stride is a constant
    (a stride read from ``cs`` measured 20-40 % slower at 2044²). Measured 2.3x the previous
    per-line, channel-interleaved writes on one thread (2044², float32 and uint8)."""
    plane = np.uint64(p * p)
    for c in range(3):
        table = lut[c]
        first = o
        for py in range(p):
            if planar:
                line = src[c, y0 + py]
                s = np.uint64(x0)
                for _px in range(p):
                    flat[o] = table[np.uint64(line[s])]
                    o += _ONE
                    s += _ONE
            elif cs == 3:
                line = src[0, y0 + py]
                s = np.uint64(x0 * 3 + c)
                for _px in range(p):
                    flat[o] = table[np.uint64(line[s])]
                    o += _ONE
                    s += _THREE
            else:
                line = src[0, y0 + py]
                s = np.uint64(x0 * 4 + c)
                for _px in range(p):
                    flat[o] = table[np.uint64(line[s])]
                    o += _ONE
                    s += _FOUR
        for _k in range(1, t):
            j = np.uint64(0)
            while j < plane:
                flat[o] = flat[first + j]
                o += _ONE
                j += _ONE


@njit(cache=True, nogil=True, inline="always")
def _row_of(gy, gx, grid_w, m):  # noqa: ANN001
    """The output row of patch (gy, gx) in merge order: (block row, block column, row in
    block, column in block)."""
    by = gy // m
    bx = gx // m
    return (by * (grid_w // m) + bx) * (m * m) + (gy - by * m) * m + (gx - bx * m)


@njit(cache=True, nogil=True, inline="always")
def _take16(d, s, step, c):  # noqa: ANN001
    """16 samples of channel ``c`` from address ``s`` (a plane's bytes when ``step`` is 1,
    else the first byte of interleaved pixels of ``step`` bytes) to address ``d``."""
    if step == 1:
        copy16(d, s)
    elif step == 3:
        if c == 0:
            rgb16_0(d, s)
        elif c == 1:
            rgb16_1(d, s)
        else:
            rgb16_2(d, s)
    elif c == 0:
        rgbx16_0(d, s)
    elif c == 1:
        rgbx16_1(d, s)
    else:
        rgbx16_2(d, s)


@njit(cache=True, nogil=True, inline="always")
def _copy_patch(src, planar, cs, flat, o, y0, x0, p, t):  # noqa: ANN001
    """:func:`_write_patch` for the identity table of a uint8 output (rescale and normalize
    off): each patch line of ``p`` samples moves as 16-byte vectors (``_numba_bytes``), in
    ascending destination order, so a short line's overrun (``16 - p`` bytes) is overwritten
    by the next line; the caller leaves ``VECTOR`` bytes of slack after the last patch. A
    line whose 16 samples would read past its source row (the right edge, when ``p`` < 16)
    is copied byte by byte."""
    width = src.shape[2] // (1 if planar else cs)
    step = 1 if planar else cs
    row_bytes = src.strides[1]
    base = np.uint64(flat.ctypes.data)
    fits = x0 + VECTOR <= width
    for c in range(3):
        if planar:
            first = np.uint64(src.ctypes.data + c * src.strides[0] + y0 * row_bytes + x0)
        else:
            first = np.uint64(src.ctypes.data + y0 * row_bytes + x0 * cs)
        for _k in range(t):
            s = first
            for py in range(p):
                d = base + np.uint64(o)
                if p >= VECTOR:
                    k = 0
                    while k + VECTOR <= p:
                        _take16(d + np.uint64(k), s + np.uint64(k * step), step, c)
                        k += VECTOR
                    if k < p:
                        _take16(d + np.uint64(p - VECTOR), s + np.uint64((p - VECTOR) * step),
                                step, c)
                elif fits:
                    _take16(d, s, step, c)
                elif planar:
                    line = src[c, y0 + py]
                    for px in range(p):
                        flat[o + px] = line[x0 + px]
                else:
                    line = src[0, y0 + py]
                    for px in range(p):
                        flat[o + px] = line[(x0 + px) * cs + c]
                o += p
                s += np.uint64(row_bytes)


@njit(cache=True, nogil=True)
def identity_table(lut):  # noqa: ANN001, ANN201
    """True when ``lut`` maps every byte to itself in a uint8 output (rescale and normalize
    off): the patch writes then copy bytes (:func:`_copy_patch`)."""
    if lut.itemsize != 1:
        return False
    for c in range(lut.shape[0]):
        for v in range(256):
            if lut[c, v] != v:
                return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _patch_row(src, planar, cs, lut, copy, stage, flat, gy, y0, grid_w, p, m, t):  # noqa: ANN001, PLR0913
    """Patch row ``gy`` (its top sample row is ``y0`` of ``src``; layouts as
    :func:`_write_patch`) into ``flat``. The ``m`` patches of one merge-block row are
    adjacent output rows: they are made in ``stage`` (``m`` rows, cache-resident), then
    streamed out (``_numba_stream``) when the output is large. ``copy``: ``lut`` is the
    identity of a uint8 output (:func:`identity_table`); the patches are then byte copies
    (:func:`_copy_patch`) where ``stage`` has ``VECTOR`` bytes of slack. Ends with a store
    fence."""
    per_patch = 3 * t * p * p
    stream = flat.nbytes >= STREAM_MIN_BYTES
    if copy and planar and stream and p == 16 and flat.ctypes.data % LINE == 0:
        # 16-pixel patches into an output on whole lines: each row streamed from the planes
        base = np.uint64(flat.ctypes.data)
        for gx in range(grid_w):
            stream_patch16(base + np.uint64(_row_of(gy, gx, grid_w, m) * per_patch),
                           src.ctypes.data + y0 * src.strides[1] + gx * 16, 0, 1,
                           src.strides[0], src.strides[1], t)
        store_fence()
        return
    copy = copy and stage.itemsize == 1 and stage.shape[0] >= m * per_patch + VECTOR
    for gx0 in range(0, grid_w, m):
        for k in range(m):
            # the layout as constants: a run-time stride made these copies ~2x slower
            if copy and planar:
                _copy_patch(src, True, 1, stage, k * per_patch, y0, (gx0 + k) * p, p, t)
            elif copy and cs == 3:
                _copy_patch(src, False, 3, stage, k * per_patch, y0, (gx0 + k) * p, p, t)
            elif copy:
                _copy_patch(src, False, 4, stage, k * per_patch, y0, (gx0 + k) * p, p, t)
            else:
                _write_patch(src, planar, cs, lut, stage, np.uint64(k * per_patch), y0,
                             (gx0 + k) * p, p, t)
        stream_copy(flat, _row_of(gy, gx0, grid_w, m) * per_patch, stage, 0, m * per_patch,
                    stream)
    store_fence()


@njit(cache=True, nogil=True, inline="always")
def _write_patch_row(src, planar, cs, lut, stage, flat, gy, y0, grid_w, p, m, t):  # noqa: ANN001, PLR0913
    """:func:`_patch_row`, finding out here whether ``lut`` is the identity (the kernels of
    this module find out once per frame)."""
    _patch_row(src, planar, cs, lut, identity_table(lut), stage, flat, gy, y0, grid_w, p, m, t)


@njit(parallel=True, cache=True, nogil=True)
def patchify_parallel(src, planar, cs, lut, out, grid_w, p, m, t):  # noqa: ANN001
    """Every patch of one frame (``src``/``planar``: see :func:`_write_patch`), one patch row
    per iteration over numba's threads (one image: all cores)."""
    flat = out.reshape(out.size)
    copy = identity_table(lut)
    for gy in prange(out.shape[0] // grid_w):
        stage = np.empty(m * out.shape[1] + VECTOR, out.dtype)
        _patch_row(src, planar, cs, lut, copy, stage, flat, gy, gy * p, grid_w, p, m, t)


@njit(cache=True, nogil=True)
def patchify_serial(src, planar, cs, lut, out, grid_w, p, m, t):  # noqa: ANN001
    """Every patch of one frame on the calling thread; releases the GIL so a thread pool can
    run many frames at once without touching numba's threading layer."""
    flat = out.reshape(out.size)
    stage = np.empty(m * out.shape[1] + VECTOR, out.dtype)
    copy = identity_table(lut)
    for gy in range(out.shape[0] // grid_w):
        _patch_row(src, planar, cs, lut, copy, stage, flat, gy, gy * p, grid_w, p, m, t)


@njit(cache=True, nogil=True, inline="always")
def _vertical_patch_row(bands, band_starts, starts, sizes, weights, precision, planar, cs,
                        lut, flat, gy, grid_w, p, m, t):  # noqa: ANN001
    """Patch row ``gy``: torch's vertical uint8 pass for its ``p`` output rows from the
    horizontally resized frame, held as row bands (``bands[b]`` holds rows ``band_starts[b]``
    up to ``band_starts[b + 1]``; layouts as :func:`_write_patch`), into a small row buffer,
    then its ``grid_w`` patches. Per output row and plane, the taps run as whole-row
    multiply-adds in int32 (``_numba_int32``; vectorized by LLVM), torch's own arithmetic:
    the sum plus half an LSB, shifted right by ``precision``, clamped to 0..255."""
    planes = bands[0].shape[0]
    length = bands[0].shape[2]
    buf = np.empty((planes, p, length), dtype=np.uint8)
    acc = np.empty(length, dtype=np.int32)
    half = np.int32(1 << (precision - 1))
    sh = np.int32(precision)
    for r in range(p):
        y = gy * p + r
        first = starts[y]
        for c in range(planes):
            acc[:] = half
            for k in range(sizes[y]):
                w = np.int16(weights[y, k])
                row_in = first + k
                b = 0
                while row_in >= band_starts[b + 1]:
                    b += 1
                line = bands[b][c, row_in - band_starts[b]]
                for x in range(length):
                    acc[x] = mad16(acc[x], w, line[x])
            row = buf[c, r]
            for x in range(length):
                row[x] = shift_to_byte(acc[x], sh)
    stage = np.empty(m * 3 * t * p * p + VECTOR, flat.dtype)
    _write_patch_row(buf, planar, cs, lut, stage, flat, gy, 0, grid_w, p, m, t)


@njit(parallel=True, cache=True, nogil=True)
def vertical_patchify_parallel(bands, band_starts, starts, sizes, weights, precision, planar, cs,
                               lut, out, grid_w, p, m, t):  # noqa: ANN001
    """The vertical pass fused with patchify, one patch row per iteration over numba's
    threads (one image: all cores)."""
    flat = out.reshape(out.size)
    grid_h = out.shape[0] // grid_w
    for gy in prange(grid_h):
        _vertical_patch_row(bands, band_starts, starts, sizes, weights, precision, planar, cs,
                            lut, flat, gy, grid_w, p, m, t)


@njit(cache=True, nogil=True)
def vertical_patchify_serial(bands, band_starts, starts, sizes, weights, precision, planar, cs,
                             lut, out, grid_w, p, m, t):  # noqa: ANN001
    """The same on the calling thread, GIL released (a thread pool runs many frames)."""
    flat = out.reshape(out.size)
    grid_h = out.shape[0] // grid_w
    for gy in range(grid_h):
        _vertical_patch_row(bands, band_starts, starts, sizes, weights, precision, planar, cs,
                            lut, flat, gy, grid_w, p, m, t)


@njit(cache=True, nogil=True)
def resize_patchify_band(src, cs, xmin, xw, xpairs, xgather, xprecision, starts, sizes, weights,  # noqa: ANN001, ANN201, PLR0913
                         ypairs, precision, lut, out, grid_w, p, m, t, g0, g1):
    """Patch rows ``g0 .. g1`` of a frame whose width and height both change, straight from
    its pixels (``src``: uint8 ``[H, W*cs]``, RGB or Pillow's RGBX): torch's horizontal pass
    (``xmin``/``xw``: its taps as equal-length windows, ``xpairs`` their
    ``torch_taps.tap_pairs``, ``xgather`` their ``byte_gather.gather_table``,
    ``xprecision``) by byte permutes or on column-major blocks into a ring of channel
    planes, each source row once per band; then its vertical pass (``starts``/``sizes``/
    ``weights``/``ypairs``, ``precision``) per output row and plane, both
    with 16-bit multiplies (``_numba_int16_taps``), and the patches.
    Neither the width-resized nor the resized frame is ever stored."""
    flat = out.reshape(out.size)
    ow = xmin.shape[0]
    taps = 1
    stop_all = 0  # one past the last source row this band reads
    for y in range(g0 * p, g1 * p):
        taps = max(taps, sizes[y])
        stop_all = max(stop_all, starts[y] + sizes[y])
    slots = taps + BLOCK_ROWS  # the rows a vertical tap still needs, plus one block ahead
    ring = np.empty((3, slots, ow), np.uint8)
    cols, hcols = column_scratch(src, cs, xgather, ring)
    acc_h = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(ow, np.uint8)
    buf = np.empty((3, p, ow), np.uint8)
    acc = np.empty(ow, np.int32)
    stage = np.empty(m * 3 * t * p * p + VECTOR, out.dtype)
    copy = identity_table(lut)
    done = starts[g0 * p]  # next source row to resample
    for gy in range(g0, g1):
        for r in range(p):
            y = gy * p + r
            stop = starts[y] + sizes[y]
            while done < stop:
                count = min(BLOCK_ROWS, stop_all - done)
                resample_planes(src, cs, done, count, xmin, xw, xpairs, xgather, xprecision,
                                cols, hcols, acc_h, ring, slots, spare)
                done += count
            for c in range(3):
                vertical_row(ring[c], starts[y], sizes[y], weights[y], ypairs[y], slots, acc,
                             buf[c, r], precision)
        _patch_row(buf, True, 3, lut, copy, stage, flat, gy, 0, grid_w, p, m, t)


@njit(cache=True, nogil=True)
def resize_patchify_band_jobs(counters, edges, src, cs, xmin, xw, xpairs, xgather, xprecision,  # noqa: ANN001, ANN201, PLR0913
                              starts, sizes, weights, ypairs, precision, lut, out, grid_w, p, m,
                              t, wait):
    """:func:`resize_patchify_band` over the bands ``edges[j] .. edges[j + 1]`` this thread
    claims from ``counters`` (``_numba_jobs``); with ``wait`` (the caller's thread), then wait
    for the bands other threads claimed. False when another thread failed."""
    bands = edges.shape[0] - 1
    job = claim(counters, bands)
    while job >= 0:
        resize_patchify_band(src, cs, xmin, xw, xpairs, xgather, xprecision, starts, sizes,
                             weights, ypairs, precision, lut, out, grid_w, p, m, t, edges[job],
                             edges[job + 1])
        finish(counters)
        job = claim(counters, bands)
    return settle(counters, bands, wait)


@njit(cache=True, nogil=True)
def patchify_band(src, cs, lut, out, grid_w, p, m, t, g0, g1):  # noqa: ANN001, ANN201, PLR0913
    """Patch rows ``g0 .. g1`` of a frame already of the grid's size (``src``: uint8
    ``[H, W*cs]``, RGB or Pillow's RGBX), as :func:`patchify_serial` writes them."""
    flat = out.reshape(out.size)
    rows = src.reshape((1, src.shape[0], src.shape[1]))
    stage = np.empty(m * out.shape[1] + VECTOR, out.dtype)
    copy = identity_table(lut)
    for gy in range(g0, g1):
        _patch_row(rows, False, cs, lut, copy, stage, flat, gy, gy * p, grid_w, p, m, t)


# Columns of ``resize_patchify_frames_jobs``'s frame table: where each image's arrays are
# (addresses) and their shapes, and its scalars. ``F_RESIZE`` 0: the image is already of
# its grid's size (no tap columns are read), 1: both its sides change.
(F_SRC, F_SRC_ROWS, F_ROW_BYTES, F_CS, F_XMIN, F_OUT_W, F_XW, F_XW_COLS, F_XPAIRS,
 F_XPAIR_COLS, F_XGATHER, F_XGATHER_BLOCKS, F_XGATHER_ROWS, F_XGATHER_COLS, F_XPRECISION,
 F_STARTS, F_OUT_H, F_SIZES, F_WEIGHTS, F_WEIGHT_COLS, F_YPAIRS, F_YPAIR_COLS, F_PRECISION,
 F_OUT, F_PATCHES, F_GRID_W, F_RESIZE) = range(27)
FRAME_COLUMNS = 27


@njit(cache=True, nogil=True)
def resize_patchify_frames_jobs(counters, jobs, frames, lut, row_length, p, m, t, wait):  # noqa: ANN001, ANN201, PLR0913
    """:func:`resize_patchify_band` (or, for an image already of its grid's size,
    :func:`patchify_band`) over the images of one call: each job ``(k, g0, g1)`` of
    ``jobs`` makes patch rows ``g0 .. g1`` of image ``k``, whose arrays the row ``frames[k]``
    gives by address (the caller holds them until every job is done). Nothing here holds a
    Python reference, so a late helper keeps none of the call's arrays."""
    n = jobs.shape[0]
    job = claim(counters, n)
    while job >= 0:
        f = frames[jobs[job, 0]]
        src = carray(bytes_at(f[F_SRC]), (f[F_SRC_ROWS], f[F_ROW_BYTES]))
        out = carray(items_at(f[F_OUT], lut), (f[F_PATCHES], row_length))
        if f[F_RESIZE] == 0:
            patchify_band(src, f[F_CS], lut, out, f[F_GRID_W], p, m, t, jobs[job, 1],
                          jobs[job, 2])
            finish(counters)
            job = claim(counters, n)
            continue
        xmin = carray(int32_at(f[F_XMIN]), (f[F_OUT_W],))
        xw = carray(int64_at(f[F_XW]), (f[F_OUT_W], f[F_XW_COLS]))
        xpairs = carray(int32_at(f[F_XPAIRS]), (f[F_OUT_W], f[F_XPAIR_COLS]))
        xgather = carray(bytes_at(f[F_XGATHER]),
                         (f[F_XGATHER_BLOCKS], f[F_XGATHER_ROWS], f[F_XGATHER_COLS]))
        starts = carray(int64_at(f[F_STARTS]), (f[F_OUT_H],))
        sizes = carray(int64_at(f[F_SIZES]), (f[F_OUT_H],))
        weights = carray(int32_at(f[F_WEIGHTS]), (f[F_OUT_H], f[F_WEIGHT_COLS]))
        ypairs = carray(int32_at(f[F_YPAIRS]), (f[F_OUT_H], f[F_YPAIR_COLS]))
        resize_patchify_band(src, f[F_CS], xmin, xw, xpairs, xgather, f[F_XPRECISION], starts,
                             sizes, weights, ypairs, f[F_PRECISION], lut, out, f[F_GRID_W], p,
                             m, t, jobs[job, 1], jobs[job, 2])
        finish(counters)
        job = claim(counters, n)
    return settle(counters, n, wait)
