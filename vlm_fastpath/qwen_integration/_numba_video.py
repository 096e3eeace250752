"""numba kernel of the Qwen-VL video processor; imported lazily by ``video_kernel`` only.

One call turns a band of patch rows of one video frame into its patches: torch's uint8
antialiased bicubic resize (both passes, torch's int16 taps: the same arithmetic as the image
kernel's ``resize_patchify_band``, on the resampler's shared passes), the LUT, and the write
of each patch's bytes straight into the frame's *temporal slot* of the output rows. An output
row of a video is ``[channel, temporal slot, py, px]``: frame ``2g`` of a pair owns slot 0 and
frame ``2g + 1`` slot 1 of the rows of group ``g`` (``temporal_patch_size`` 2), so the two
frames of a pair are merged where they are written, by whichever threads run them, and no
frame-pair tensor is ever stored. A last frame that has no partner fills the remaining slots
too (transformers pads an odd clip by repeating its last frame).

Own module so importing the package never imports numba; serial and ``nogil``: the Python
side spreads frames and bands over the resize thread pool, so numba's threading layers are
never involved.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlm_fastpath._numba_stream import STREAM_MIN_BYTES, store_fence, stream_copy
from vlm_fastpath.kimi_integration._numba_resample import BLOCK_ROWS, _vertical, resample_planes

_ONE = np.uint64(1)


@njit(cache=True, nogil=True, inline="always")
def _row_of(gy, gx, grid_w, m):  # noqa: ANN001, ANN202
    """The output row of patch (gy, gx) in merge order (block row, block column, row in
    block, column in block)."""
    by = gy // m
    bx = gx // m
    return (by * (grid_w // m) + bx) * (m * m) + (gy - by * m) * m + (gx - bx * m)


@njit(cache=True, nogil=True)
def _write_slot_patch_row(buf, lut, flat, stage, gy, grid_w, p, m, t, slot0, nslots, stream):  # noqa: ANN001, ANN202, PLR0913
    """Patch row ``gy`` of a resized frame held as ``buf`` (uint8 ``[3, p, W]`` planes) into
    temporal slots ``slot0 .. slot0 + nslots`` of its output rows in ``flat``: per patch and
    channel, ``p * p`` values mapped through ``lut`` into ``stage`` once, then copied to
    each slot (streamed when the output is large)."""
    pp = p * p
    per_patch = 3 * t * pp
    for gx in range(grid_w):
        x0 = np.uint64(gx * p)
        o = np.uint64(0)
        for c in range(3):
            table = lut[c]
            for py in range(p):
                line = buf[c, py]
                s = x0
                for _px in range(p):
                    stage[o] = table[np.uint64(line[s])]
                    o += _ONE
                    s += _ONE
        row = _row_of(gy, gx, grid_w, m) * per_patch
        for c in range(3):
            for k in range(slot0, slot0 + nslots):
                stream_copy(flat, row + (c * t + k) * pp, stage, c * pp, pp, stream)


@njit(cache=True, nogil=True)
def resize_patchify_slot_band(src, cs, xmin, xw, xprecision, starts, sizes, weights, precision,  # noqa: ANN001, ANN201, PLR0913
                              lut, out, grid_w, p, m, t, slot0, nslots, g0, g1):
    """Patch rows ``g0 .. g1`` of one frame (``src``: uint8 ``[H, W*cs]`` rows, RGB or
    RGBX) resized with torch's arithmetic (``xmin``/``xw``/``xprecision``: the horizontal
    taps as equal-length windows; ``starts``/``sizes``/``weights``/``precision``: the
    vertical ones) into slots ``slot0 .. slot0 + nslots`` of ``out``, the rows of the frame's
    temporal group (``[grid_h * grid_w, 3 * t * p * p]``). Each source row is resampled once
    per band into a ring of channel planes; neither resized frame is ever stored."""
    flat = out.reshape(out.size)
    stream = flat.nbytes >= STREAM_MIN_BYTES
    width = src.shape[1] // cs
    ow = xmin.shape[0]
    n = ow * 3
    taps = 1
    stop_all = 0
    for y in range(g0 * p, g1 * p):
        taps = max(taps, sizes[y])
        stop_all = max(stop_all, starts[y] + sizes[y])
    slots = taps + BLOCK_ROWS
    ring = np.empty((3, slots, ow), np.uint8)
    cols = np.empty(width * 3 * BLOCK_ROWS // 8, np.uint64)
    hcols = np.empty(n * BLOCK_ROWS // 8, np.uint64)
    acc_h = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(ow, np.uint8)
    buf = np.empty((3, p, ow), np.uint8)
    acc = np.empty(ow, np.int32)
    stage = np.empty(3 * p * p, out.dtype)
    done = starts[g0 * p]
    for gy in range(g0, g1):
        for r in range(p):
            y = gy * p + r
            stop = starts[y] + sizes[y]
            while done < stop:
                count = min(BLOCK_ROWS, stop_all - done)
                resample_planes(src, cs, done, count, xmin, xw, xprecision, cols, hcols, acc_h,
                                ring, slots, spare)
                done += count
            for c in range(3):
                _vertical(ring[c], starts[y], sizes[y], weights[y], slots, acc, buf[c, r],
                          precision)
        _write_slot_patch_row(buf, lut, flat, stage, gy, grid_w, p, m, t, slot0, nslots, stream)
    store_fence()


@njit(cache=True, nogil=True)
def patchify_slot_band(planes, lut, out, grid_w, p, m, t, slot0, nslots, g0, g1):  # noqa: ANN001, ANN201, PLR0913
    """Patch rows ``g0 .. g1`` of a frame already at its final size, as uint8 ``[3, H, W]``
    channel planes (no resize: transformers leaves such a frame untouched), into slots
    ``slot0 .. slot0 + nslots`` of ``out`` (as :func:`resize_patchify_slot_band`)."""
    flat = out.reshape(out.size)
    stream = flat.nbytes >= STREAM_MIN_BYTES
    stage = np.empty(3 * p * p, out.dtype)
    for gy in range(g0, g1):
        _write_slot_patch_row(planes[:, gy * p:(gy + 1) * p], lut, flat, stage, gy, grid_w, p,
                              m, t, slot0, nslots, stream)
    store_fence()


# ``LazyKernels`` looks these two names up; the video path calls the band kernels above.
patchify_parallel = resize_patchify_slot_band
patchify_serial = resize_patchify_slot_band
