"""numba builds of the Qwen-VL patch kernel; imported lazily by ``patchify_kernel`` only.

Own module so that importing the package never imports numba (slow, and numba imported at the
wrong moment has crashed vLLM CPU workers at start-up).
"""

from __future__ import annotations

from numba import njit, prange


@njit(cache=True, nogil=True, inline="always")
def _fill_patch(frame, lut, out, idx, grid_w, p, m, t):  # noqa: ANN001
    # idx is the output row in merge order: (block row, block col, row in block, col in block).
    blocks_w = grid_w // m
    per_block = m * m
    blk = idx // per_block
    within = idx - blk * per_block
    by = blk // blocks_w
    bx = blk - by * blocks_w
    my = within // m
    mx = within - my * m
    y0 = (by * m + my) * p
    x0 = (bx * m + mx) * p
    plane = p * p
    dst = out[idx]
    # First temporal copy: one p x 3 byte run of the frame per patch line, mapped per channel.
    for py in range(p):
        seg = frame[y0 + py, x0 : x0 + p]
        for c in range(3):
            table = lut[c]
            base = c * t * plane + py * p
            for px in range(p):
                dst[base + px] = table[seg[px, c]]
    # The other temporal copies are contiguous block copies of the first.
    for c in range(3):
        first = c * t * plane
        for k in range(1, t):
            off = first + k * plane
            for j in range(plane):
                dst[off + j] = dst[first + j]


@njit(parallel=True, cache=True, nogil=True)
def patchify_parallel(frame, lut, out, grid_w, p, m, t):  # noqa: ANN001
    """Every patch of one frame, spread over numba's threads (one image: all cores)."""
    for idx in prange(out.shape[0]):
        _fill_patch(frame, lut, out, idx, grid_w, p, m, t)


@njit(cache=True, nogil=True)
def patchify_serial(frame, lut, out, grid_w, p, m, t):  # noqa: ANN001
    """Every patch of one frame on the calling thread; releases the GIL so a thread pool can
    run many frames at once without touching numba's threading layer."""
    for idx in range(out.shape[0]):
        _fill_patch(frame, lut, out, idx, grid_w, p, m, t)
