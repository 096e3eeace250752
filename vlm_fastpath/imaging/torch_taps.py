"""The int16 taps of torch's uint8 antialiased bicubic resize along one axis.

Why: the torchvision Qwen-VL processor resizes with torch's uint8 antialiased bicubic, which
runs the horizontal pass, rounds to uint8, then the vertical pass. We run both passes
ourselves in numba with torch's integer arithmetic: the horizontal one on column-major row
blocks (``imaging._numba_resample``), the vertical one fused with the
LUT normalize and patchify (``_numba_patchify``), so the resized frame is never written out.
That needs each pass's exact integer taps, computed here as torch computes them (ATen
``UpSampleKernel.cpp``, ``HelperInterpBase::_compute_indices_min_size_weights_aa`` and
``_compute_index_ranges_int16_weights``, align_corners False, no scale factor): double weights
from the Keys cubic (a = -0.5) over PIL's support, normalized per output sample, scaled to
int16 at the largest precision under which the axis's largest weight stays below 2**15,
rounded half away from zero. Tests compare both passes with torch's own resize on random and
real images over many sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .byte_gather import gather_table
from .tap_windows import pad_windows

_A = -0.5  # Keys' cubic, as torch's (and Pillow's) bicubic


@dataclass(frozen=True)
class AxisTaps:
    """Per output index ``i``: input rows ``starts[i] ... starts[i] + sizes[i] - 1`` with
    weights ``weights[i, :sizes[i]]`` (int32 holding torch's int16 values); the sum plus
    ``1 << (precision - 1)`` is shifted right by ``precision`` and clamped to 0..255."""

    starts: np.ndarray  # int64 [out]
    sizes: np.ndarray  # int64 [out]
    weights: np.ndarray  # int32 [out, max taps]
    precision: int
    pairs: np.ndarray  # int32 [out, (max taps + 1) // 2]: ``tap_pairs(weights)``


def tap_pairs(weights: np.ndarray) -> np.ndarray:
    """``weights`` (int16 values, zero past each window) two to an int32, tap ``2i`` in the
    low 16 bits and ``2i + 1`` in the high, read-only: the operand of the kernels' two-taps-
    per-multiply sweeps (``_numba_tap_pairs``), made once per plan instead of per block."""
    rows, taps = weights.shape
    even = np.zeros((rows, taps + taps % 2), np.int64)
    even[:, :taps] = weights
    halves = even & 0xFFFF  # each int16 value's two bytes
    pairs = (halves[:, 0::2] | (halves[:, 1::2] << 16)).astype(np.uint32).view(np.int32)
    pairs.setflags(write=False)
    return pairs


def _cubic(x: float) -> float:
    x = abs(x)
    if x < 1.0:
        return ((_A + 2.0) * x - (_A + 3.0)) * x * x + 1.0
    if x < 2.0:
        return ((_A * x - 5.0 * _A) * x + 8.0 * _A) * x - 4.0 * _A
    return 0.0


def _trunc(value: float) -> int:
    return int(value)  # C's double -> int64 conversion: toward zero


@lru_cache(maxsize=256)
def axis_taps(in_size: int, out_size: int) -> AxisTaps:
    """torch's taps for resizing an axis of ``in_size`` samples to ``out_size``."""
    if in_size < 1 or out_size < 1:
        raise ValueError(f"axis sizes must be positive, got {in_size} -> {out_size}")
    scale = in_size / out_size
    support = 2.0 * scale if scale >= 1.0 else 2.0  # (interp_size * 0.5) * scale, interp 4
    max_taps = math.ceil(support) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    starts = np.zeros(out_size, dtype=np.int64)
    sizes = np.zeros(out_size, dtype=np.int64)
    doubles = np.zeros((out_size, max_taps), dtype=np.float64)
    wt_max = 0.0
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(_trunc(center - support + 0.5), 0)
        xsize = min(_trunc(center + support + 0.5), in_size) - xmin
        xsize = min(max(xsize, 0), max_taps)
        row = [_cubic((j + xmin - center + 0.5) * invscale) for j in range(xsize)]
        total = 0.0
        for w in row:
            total += w
        if total != 0.0:
            row = [w / total for w in row]
            wt_max = max([wt_max, *row])
        starts[i], sizes[i] = xmin, xsize
        doubles[i, :xsize] = row
    precision = 0
    while precision < 22:
        if int(0.5 + wt_max * (1 << (precision + 1))) >= 1 << 15:
            break
        precision += 1
    scaled = doubles * float(1 << precision)
    rounded = np.where(scaled < 0, np.trunc(-0.5 + scaled), np.trunc(0.5 + scaled))
    weights = rounded.astype(np.int32)
    for array in (starts, sizes, weights):
        array.setflags(write=False)
    return AxisTaps(starts, sizes, weights, precision, tap_pairs(weights))


@lru_cache(maxsize=256)
def padded_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``axis_taps`` as equal-length windows for the numba horizontal pass: (first index
    int32, int64 weights, precision)."""
    taps = axis_taps(in_size, out_size)
    start, weights = pad_windows(taps.starts, taps.sizes, taps.weights, in_size)
    return start, weights, taps.precision


@lru_cache(maxsize=256)
def padded_pairs(in_size: int, out_size: int) -> np.ndarray:
    """:func:`tap_pairs` of :func:`padded_taps`' weights (the horizontal pass's)."""
    return tap_pairs(padded_taps(in_size, out_size)[1])


@lru_cache(maxsize=256)
def padded_gather(in_size: int, out_size: int, cs: int) -> np.ndarray:
    """:func:`byte_gather.gather_table` of :func:`padded_taps` over rows of ``cs``-byte
    pixels (the horizontal pass's; no blocks where it cannot serve)."""
    xmin, weights, _ = padded_taps(in_size, out_size)
    return gather_table(xmin, weights.shape[1], padded_pairs(in_size, out_size), in_size, cs)


def horizontal_taps(in_size: int, out_size: int, cs: int) -> tuple[Any, ...]:
    """Everything the int16 horizontal pass takes, in its kernels' argument order: first
    indices, weights, :func:`padded_pairs`, :func:`padded_gather` for ``cs``-byte pixels,
    precision (one home for the tuple the image, frame-band and video kernels share)."""
    start, weights, precision = padded_taps(in_size, out_size)
    return (start, weights, padded_pairs(in_size, out_size),
            padded_gather(in_size, out_size, cs), precision)
