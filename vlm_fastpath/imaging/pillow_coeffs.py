"""Pillow's resampling weights and pass order: the one home of that arithmetic.

Both Pillow-exact resamplers use it: the torch port of deferred preprocessing
(:mod:`.deferred.resize`) and the fused CPU kernel (:mod:`.resample`). Bit-exactness with
Pillow needs the same integers, so every expression below follows Pillow's C source
(``src/libImaging/Resample.c``: the filters, ``precompute_coeffs``,
``normalize_coeffs_8bpc``) operation by operation in float64.

Which pass runs first decides the 8-bit intermediate, and that changed between releases (read
from each release's ``Resample.c`` and ``Image.py``; see ``ci/pillow/VERIFIED.md``):

- up to 12.1: always horizontal first;
- 12.2 and 12.3: ``Image.resize`` splits images taller than 100x their width (when the height
  shrinks) into a vertical-only resize followed by a horizontal-only one: vertical first;
- 13.0: ``ImagingResampleInner`` runs the vertical pass first when
  ``(H - oh) > 0 and (H - oh) > 2 * (W - ow)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import PIL

PRECISION_BITS = 32 - 8 - 2
"""Fractional bits of Pillow's 8-bit fixed-point weights (``Resample.c``)."""

_BICUBIC_A = -0.5


def _bicubic(x: np.ndarray) -> np.ndarray:
    # bicubic_filter: same expressions, same evaluation order (float64).
    x = np.abs(x)
    near = ((_BICUBIC_A + 2.0) * x - (_BICUBIC_A + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * _BICUBIC_A
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x  # libm's sin, as Pillow's C calls it (numpy's may differ by an ulp)


def _lanczos(x: np.ndarray) -> np.ndarray:
    flat = [(_sinc(v) * _sinc(v / 3)) if -3.0 <= v < 3.0 else 0.0 for v in x.ravel().tolist()]
    return np.asarray(flat, dtype=np.float64).reshape(x.shape)


FILTERS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "bilinear": (_bilinear, 1.0),
    "bicubic": (_bicubic, 2.0),
    "lanczos": (_lanczos, 3.0),
}
"""Filter name -> (Pillow's filter function in float64, its support)."""


def pillow_version(version: str | None = None) -> tuple[int, ...]:
    """``PIL.__version__`` (or ``version``) as an int tuple, e.g. ``(13, 0, 0)``."""
    parts = []
    for piece in (PIL.__version__ if version is None else version).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def vertical_first(
    in_w: int, in_h: int, out_w: int, out_h: int, version: tuple[int, ...] | None = None
) -> bool:
    """True when Pillow ``version`` (default: the installed one) resizes vertically first."""
    version = pillow_version() if version is None else version
    if version >= (13, 0):
        # ImagingResampleInner: horizontal_first = !((H-oh) > 0 && (H-oh) > (W-ow) * 2)
        return in_h - out_h > 0 and in_h - out_h > 2 * (in_w - out_w)
    if version >= (12, 2):
        # Image.resize: "if self.size[1] > self.size[0] * 100 and size[1] < self.size[1]"
        return in_h > in_w * 100 and out_h < in_h
    return False


@functools.lru_cache(maxsize=256)
def pillow_coefficients(
    in_size: int, out_size: int, filter_name: str = "bicubic"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pillow's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` for the full box.

    Returns ``(xmin, count, weights)``: int64 ``[out]``, int64 ``[out]`` and the int32
    fixed-point weights ``[out, ksize]`` (zero beyond ``count``). Read-only (cached).
    """
    if in_size <= 0 or out_size <= 0:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")
    if filter_name not in FILTERS:
        raise ValueError(f"unknown filter {filter_name!r}; known: {sorted(FILTERS)}")
    function, filter_support = FILTERS[filter_name]
    # scale = (double)(in1 - in0) / outSize with float in0 = 0, in1 = in_size
    scale = float(np.float32(in_size) - np.float32(0.0)) / out_size
    filterscale = max(scale, 1.0)
    support = filter_support * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = 0.0 + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    inv_filterscale = 1.0 / filterscale
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size)
    count = xmax - xmin
    taps = np.arange(ksize, dtype=np.int64)
    valid = taps[None, :] < count[:, None]
    arg = ((taps[None, :] + xmin[:, None]).astype(np.float64) - center[:, None] + 0.5)
    weights = np.where(valid, function(arg * inv_filterscale), 0.0)
    total = np.zeros(out_size, dtype=np.float64)
    for k in range(ksize):  # sequential sum, in Pillow's order
        total = total + weights[:, k]
    safe = np.where(total != 0.0, total, 1.0)
    weights = np.where(total[:, None] != 0.0, weights / safe[:, None], weights)
    scaled = weights * (1 << PRECISION_BITS)
    fixed = np.where(weights < 0, np.trunc(-0.5 + scaled), np.trunc(0.5 + scaled))
    fixed = fixed.astype(np.int32)
    for array in (xmin, count, fixed):
        array.setflags(write=False)
    return xmin, count, fixed
