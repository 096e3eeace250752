"""numba builds of the patch-major kernel; imported lazily by ``patchify_kernel`` only.

Kept in its own module so that importing the package never imports numba (slow, and numba
imported at the wrong moment has crashed vLLM CPU workers at start-up).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from vlm_fastpath.imaging._numba_stream import STREAM_MIN_BYTES, store_fence, stream_copy

STAGE_PATCHES = 8  # patches made in a cache-resident stage before they are streamed out


@njit(cache=True, nogil=True, inline="always")
def _fill_patch(frame, lut, stage, o, gy, gx, p):  # noqa: ANN001, PLR0913
    """Patch (gy, gx) of ``frame`` (HWC uint8; right and bottom padded with ``lut[c][0]``)
    as ``[3, p, p]`` values at ``stage[o:]``."""
    height = frame.shape[0]
    width = frame.shape[1]
    y0 = gy * p
    x0 = gx * p
    if y0 + p <= height and x0 + p <= width:
        # Interior patch (almost all of them): no bounds tests in the inner loop.
        for c in range(3):
            table = lut[c]
            for py in range(p):
                row = frame[y0 + py]
                for px in range(p):
                    stage[o] = table[row[x0 + px, c]]
                    o += 1
        return
    for c in range(3):
        table = lut[c]
        pad_value = table[0]
        for py in range(p):
            y = y0 + py
            if y < height:
                row = frame[y]
                for px in range(p):
                    x = x0 + px
                    stage[o] = table[row[x, c]] if x < width else pad_value
                    o += 1
            else:
                for _px in range(p):
                    stage[o] = pad_value
                    o += 1


@njit(cache=True, nogil=True, inline="always")
def _patch_row(frame, lut, flat, stage, gy, grid_w, p):  # noqa: ANN001, PLR0913
    """Patch row ``gy`` into ``flat`` (the output as one vector), :data:`STAGE_PATCHES` at a
    time through ``stage``, streamed out when the output is large (``_numba_stream``).
    Ends with a store fence."""
    per = 3 * p * p
    chunk = stage.shape[0] // per
    stream = flat.nbytes >= STREAM_MIN_BYTES
    for c0 in range(0, grid_w, chunk):
        c1 = min(grid_w, c0 + chunk)
        for gx in range(c0, c1):
            _fill_patch(frame, lut, stage, (gx - c0) * per, gy, gx, p)
        stream_copy(flat, (gy * grid_w + c0) * per, stage, 0, (c1 - c0) * per, stream)
    store_fence()


@njit(parallel=True, cache=True, nogil=True)
def patchify_parallel(frame, lut, out, grid_w, p):  # noqa: ANN001
    """All patches of one frame, one patch row per iteration over numba's threads (one
    image: use every core)."""
    flat = out.reshape(out.size)
    for gy in prange(out.shape[0] // grid_w):
        stage = np.empty(STAGE_PATCHES * 3 * p * p, out.dtype)
        _patch_row(frame, lut, flat, stage, gy, grid_w, p)


@njit(cache=True, nogil=True)
def patchify_serial(frame, lut, out, grid_w, p):  # noqa: ANN001
    """All patches of one frame on the calling thread; releases the GIL, so a thread pool can
    run many frames at once without numba's threading layer (no workqueue/OpenMP hazards)."""
    flat = out.reshape(out.size)
    stage = np.empty(STAGE_PATCHES * 3 * p * p, out.dtype)
    for gy in range(out.shape[0] // grid_w):
        _patch_row(frame, lut, flat, stage, gy, grid_w, p)
