"""Qwen-VL's target-size rule, as a pure function of the input size.

Same results as transformers' ``smart_resize`` (Python floats, banker's ``round``, the same
three branches), and the same error for an aspect ratio above 200 (a ``ValueError``
subclass here). Inputs transformers would divide by zero on, or targets of zero pixels, are
refused with a clear error instead.
"""

from __future__ import annotations

import math

from .errors import AspectRatioError

MAX_ASPECT_RATIO = 200


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 14 * 14 * 4 * 1280,
) -> tuple[int, int]:
    """(new_height, new_width): both multiples of ``factor``, area within [min, max] pixels,
    aspect ratio kept as closely as the grid allows."""
    if height <= 0 or width <= 0:
        raise AspectRatioError(f"image has zero size ({width}x{height})")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise AspectRatioError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {ratio}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if h_bar <= 0 or w_bar <= 0:
        # transformers would hand torch/Pillow a zero-sized target and fail deep inside.
        raise AspectRatioError(
            f"image of {width}x{height} resizes to an empty {w_bar}x{h_bar} grid "
            f"(factor {factor}, min_pixels {min_pixels}, max_pixels {max_pixels})"
        )
    return h_bar, w_bar
