"""numba builds of the patch-major kernel; imported lazily by ``patchify_kernel`` only.

Kept in its own module so that importing the package never imports numba (slow, and numba
imported at the wrong moment has crashed vLLM CPU workers at start-up).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, inline="always")
def _fill_patch(frame, lut, out, idx, grid_w, p):  # noqa: ANN001
    height = frame.shape[0]
    width = frame.shape[1]
    gy = idx // grid_w
    y0 = gy * p
    x0 = (idx - gy * grid_w) * p
    for c in range(3):
        pad_value = lut[c, 0]
        for py in range(p):
            y = y0 + py
            if y < height:
                for px in range(p):
                    x = x0 + px
                    if x < width:
                        out[idx, c, py, px] = lut[c, frame[y, x, c]]
                    else:
                        out[idx, c, py, px] = pad_value
            else:
                for px in range(p):
                    out[idx, c, py, px] = pad_value


@njit(parallel=True, cache=True, nogil=True)
def patchify_parallel(frame, lut, out, grid_h, grid_w, p):  # noqa: ANN001
    for idx in prange(grid_h * grid_w):
        _fill_patch(frame, lut, out, idx, grid_w, p)


@njit(cache=True, nogil=True)
def patchify_serial(frame, lut, out, grid_h, grid_w, p):  # noqa: ANN001
    for idx in range(grid_h * grid_w):
        _fill_patch(frame, lut, out, idx, grid_w, p)


__all__ = ["patchify_parallel", "patchify_serial", "np"]
