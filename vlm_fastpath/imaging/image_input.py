"""The checks every model applies to an input before it becomes pixels.

Each model decides which inputs it takes and how they become RGB (``convert("RGB")`` for
Kimi, transformers' rules for Qwen); what they share lives here: seeing through an engine's
media wrapper, telling a tensor apart without importing torch, and Pillow's zero-size and
decompression-bomb rule for any input, decoded or not, raising the caller's error classes.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from .errors import ImagingInputError, PixelLimitError


def unwrap(obj: Any) -> Any:
    """The media inside vLLM's ``MediaWithBytes(media=..., original_bytes=...)``, else ``obj``."""
    if hasattr(obj, "media") and hasattr(obj, "original_bytes"):
        return obj.media
    return obj


def is_tensor(obj: Any) -> bool:
    """True for a torch tensor (checked by module name: importing torch is not needed)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach")


def bomb_limit() -> int | None:
    """Pillow's error threshold for decoded images: ``2 * Image.MAX_IMAGE_PIXELS`` (None: off)."""
    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


def check_pixel_count(
    width: int,
    height: int,
    *,
    input_error: type[ImagingInputError] = ImagingInputError,
    limit_error: type[PixelLimitError] = PixelLimitError,
) -> None:
    """Pillow's decompression-bomb rule (and a zero-size check) for any input, decoded or not,
    raising the caller's classes so each model keeps its own errors."""
    if width <= 0 or height <= 0:
        raise input_error(f"image has zero size ({width}x{height})")
    limit = bomb_limit()
    if limit is not None and width * height > limit:
        raise limit_error(
            f"image of {width}x{height} = {width * height} pixels exceeds Pillow's "
            f"decompression-bomb limit of {limit} pixels (2 * PIL.Image.MAX_IMAGE_PIXELS)"
        )
