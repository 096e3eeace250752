"""PNG's per-row filters undone (PNG specification, section 9), without the GIL; numba.

Why: once libdeflate has inflated a PNG's image data (``decode.png_rows``), what is left is
reversing each row's filter: a running sum along the row whose terms depend on the byte one
pixel to the left (Sub, Average, Paeth) and the row above (Up, Average, Paeth). That is a
chain through every pixel of a row, so its speed is the chain's latency: the bytes one pixel
to the left are kept in registers, one chain per channel running side by side, instead of
being read back from the row just written.

How: ``UNFILTER[bpp](raw, rows)`` walks the rows in order and writes each one whole into
``rows`` before the next (``row_progress`` follows the rows as they come). The row above the
first is zeros, as the specification says. A filter type other than 0-4 stops the walk and is
reported. The row functions are compiled per filter type and pixel size (8-bit samples, 1 to
4 channels: ``bpp`` bytes), so the branches on both fold away (against one function taking
both as arguments: ``benchmarks/results/decode.md``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NONE, SUB, UP, AVERAGE, PAETH = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True, inline="always")
def _paeth(a, b, c):  # noqa: ANN001, ANN202
    """The specification's predictor: of left, above and upper-left, the one nearest
    ``a + b - c`` (ties in that order); both choices made, then one taken (no branch: which
    one wins in a photograph is a coin toss)."""
    pa = abs(b - c)
    pb = abs(a - c)
    pc = abs(a + b - c - c)
    b_or_c = b if pb <= pc else c
    return a if (pa <= pb) & (pa <= pc) else b_or_c


@njit(cache=True, nogil=True, inline="always")
def _next(kind, x, a, b, c):  # noqa: ANN001, ANN202
    """One byte back from filter ``kind``: ``x`` filtered, ``a`` left, ``b`` above, ``c``
    upper left (all already unfiltered)."""
    if kind == SUB:
        return (x + a) & 0xFF
    if kind == AVERAGE:
        return (x + ((a + b) >> 1)) & 0xFF
    return (x + _paeth(a, b, c)) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _lane(kind, line, prev, cur, i, a, c):  # noqa: ANN001, ANN202
    """Byte ``i`` of one channel's chain; returns it and the byte above (the next ``a, c``)."""
    b = np.int64(prev[i])
    a = _next(kind, np.int64(line[i]), a, b, c)
    cur[i] = a
    return a, b


def _chained_row(kind: int, bpp: int):  # noqa: ANN202
    """Sub, Average or Paeth on rows of ``bpp``-byte pixels, both fixed when compiled (the
    branches on them fold away): one register chain per channel, side by side."""

    @njit(cache=True, nogil=True)
    def row(line, prev, cur):  # noqa: ANN001, ANN202
        a0 = a1 = a2 = a3 = 0
        c0 = c1 = c2 = c3 = 0
        for i in range(0, cur.shape[0], bpp):
            a0, c0 = _lane(kind, line, prev, cur, i, a0, c0)
            if bpp > 1:
                a1, c1 = _lane(kind, line, prev, cur, i + 1, a1, c1)
            if bpp > 2:
                a2, c2 = _lane(kind, line, prev, cur, i + 2, a2, c2)
            if bpp > 3:
                a3, c3 = _lane(kind, line, prev, cur, i + 3, a3, c3)

    return row


def _unfilter(bpp: int):  # noqa: ANN202
    sub, average, paeth = (_chained_row(kind, bpp) for kind in (SUB, AVERAGE, PAETH))

    @njit(cache=True, nogil=True)
    def unfilter(raw, rows):  # noqa: ANN001, ANN202
        height, stride = rows.shape
        zeros = np.zeros(stride, np.uint8)
        src = 0
        for y in range(height):
            kind = raw[src]
            line = raw[src + 1:src + 1 + stride]
            src += stride + 1
            cur = rows[y]
            prev = rows[y - 1] if y > 0 else zeros
            if kind == NONE:
                cur[:] = line
            elif kind == UP:
                for i in range(stride):
                    cur[i] = (line[i] + prev[i]) & 0xFF
            elif kind == SUB:
                sub(line, prev, cur)
            elif kind == AVERAGE:
                average(line, prev, cur)
            elif kind == PAETH:
                paeth(line, prev, cur)
            else:
                return y
        return -1

    return unfilter


# bytes per pixel -> ``unfilter(raw, rows)``: ``rows[y]`` = row ``y`` unfiltered, for every row
# in order; ``raw`` is the inflated image data (per row: the filter type byte, then
# ``rows.shape[1]`` bytes). Returns -1, or the first row whose filter type is unknown (the
# rows before it are written). Each compiles on its first call.
UNFILTER = {bpp: _unfilter(bpp) for bpp in (1, 2, 3, 4)}
