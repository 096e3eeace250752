"""numba builds of the patch-major kernel; imported lazily by ``patchify_kernel`` only.

Kept in its own module so that importing the package never imports numba (slow, and numba
imported at the wrong moment has crashed vLLM CPU workers at start-up).
"""

from __future__ import annotations

from numba import njit, prange


@njit(cache=True, nogil=True, inline="always")
def _fill_patch(frame, lut, out, idx, grid_w, p):  # noqa: ANN001
    height = frame.shape[0]
    width = frame.shape[1]
    gy = idx // grid_w
    y0 = gy * p
    x0 = (idx - gy * grid_w) * p
    if y0 + p <= height and x0 + p <= width:
        # Interior patch (almost all of them): no bounds tests in the inner loop.
        for c in range(3):
            table = lut[c]
            for py in range(p):
                row = frame[y0 + py]
                dst = out[idx, c, py]
                for px in range(p):
                    dst[px] = table[row[x0 + px, c]]
        return
    for c in range(3):
        table = lut[c]
        pad_value = table[0]
        for py in range(p):
            y = y0 + py
            dst = out[idx, c, py]
            if y < height:
                row = frame[y]
                for px in range(p):
                    x = x0 + px
                    dst[px] = table[row[x, c]] if x < width else pad_value
            else:
                for px in range(p):
                    dst[px] = pad_value


@njit(parallel=True, cache=True, nogil=True)
def patchify_parallel(frame, lut, out, grid_w, p):  # noqa: ANN001
    """All patches of one frame, spread over numba's threads (one image: use every core)."""
    for idx in prange(out.shape[0]):
        _fill_patch(frame, lut, out, idx, grid_w, p)


@njit(cache=True, nogil=True)
def patchify_serial(frame, lut, out, grid_w, p):  # noqa: ANN001
    """All patches of one frame on the calling thread; releases the GIL, so a thread pool can
    run many frames at once without numba's threading layer (no workqueue/OpenMP hazards)."""
    for idx in range(out.shape[0]):
        _fill_patch(frame, lut, out, idx, grid_w, p)
