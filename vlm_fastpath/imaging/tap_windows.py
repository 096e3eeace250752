"""Equal-length tap windows, the form the column-major horizontal pass reads.

Why: the numba horizontal pass (``_numba_resample._horizontal_columns``) runs every output
pixel over the same number of taps, so its inner loops have one length and no exit that
mispredicts. Pillow's taps (``pillow_coeffs``) and torch's int16 taps (``qwen_integration.
torch_taps``) both come as (first input index, tap count, weights) per output index; here the
shorter windows get zero weights, and a window that would run past the input's end starts
earlier instead, so the sums are the original ones exactly.
"""

from __future__ import annotations

import numpy as np


def pad_windows(
    starts: np.ndarray, counts: np.ndarray, weights: np.ndarray, in_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(first index int32, int64 weights [out, max(counts)])``, read-only.

    Needs ``max(counts) <= in_size`` (true of any resize's taps: a window never holds more
    input samples than there are)."""
    taps = int(counts.max())
    if taps > in_size:
        raise ValueError(f"{taps} taps over an axis of {in_size} samples")
    start = np.minimum(starts, in_size - taps).astype(np.int32)
    shift = starts - start
    padded = np.zeros((starts.shape[0], taps), np.int64)
    for x in range(starts.shape[0]):
        padded[x, shift[x] : shift[x] + counts[x]] = weights[x, : counts[x]]
    for array in (start, padded):
        array.setflags(write=False)
    return start, padded
