"""Turn what an engine hands the processor into RGB pixels, as transformers reads them.

PIL images go through ``convert("RGB")`` (what ``do_convert_rgb`` does in both transformers
processors), transparent ones as the mirrored transformers converts them (``rgb_rules``).
uint8 arrays and tensors follow transformers' channel rule: channels-first when the first axis
is 1 or 3 (or 4, where transformers 5.21+ looks for RGBA), else channels-last when the last
axis is. Only 3-channel pixels are accepted: transformers before 5.21 fails (or emits a
different patch width) on 1 or 4 channels, and a float array has no single right mapping to
bytes, so both are refused with a ``QwenInputError`` rather than guessed at.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from .._tensors import host_numpy
from ..imaging.image_input import check_pixel_count as _check_pixel_count
from ..imaging.image_input import is_tensor as _is_tensor
from ..imaging.image_input import unwrap as _unwrap
from .errors import QwenImageTooLargeError, QwenInputError
from .rgb_rules import DROP, RulesSource, convert, has_transparency

CHANNELS_FIRST = "channels_first"
CHANNELS_LAST = "channels_last"


def check_pixel_count(width: int, height: int) -> None:
    """Pillow's zero-size and decompression-bomb rule, with Qwen's error classes."""
    _check_pixel_count(width, height, input_error=QwenInputError,
                       limit_error=QwenImageTooLargeError)


def is_image_like(obj: Any) -> bool:
    obj = _unwrap(obj)
    return isinstance(obj, (Image.Image, np.ndarray)) or _is_tensor(obj)


def flatten_images(images: Any) -> list[Any]:
    """One flat list of single images from an image, a list, a list of lists or a 4-D batch."""
    images = _unwrap(images)
    if is_image_like(images):
        ndim = None if isinstance(images, Image.Image) else len(images.shape)
        if ndim == 4:
            return [images[i] for i in range(images.shape[0])]
        return [images]
    if isinstance(images, (str, bytes)) or not isinstance(images, Sequence):
        raise QwenInputError(_type_message(images))
    flat: list[Any] = []
    for item in images:
        flat.extend(flatten_images(item))
    return flat


def _type_message(obj: Any) -> str:
    return (
        f"unsupported image type {type(obj).__name__}: expected PIL.Image.Image, a uint8 numpy "
        "array or torch tensor (HWC or CHW, 3 channels), or a list of them"
    )


def _array_to_hwc(
    array: np.ndarray, input_data_format: str | None, rules: RulesSource | None = None
) -> np.ndarray:
    if array.dtype != np.uint8:
        raise QwenInputError(
            f"pixel arrays must be uint8, got dtype {array.dtype}; convert floats to uint8 "
            "yourself (there is no single right rescaling)"
        )
    if array.ndim != 3:
        raise QwenInputError(
            f"pixel arrays must be 3-D (HWC or CHW with 3 channels), got shape {array.shape}; "
            "convert grayscale to RGB first"
        )
    layout = input_data_format
    if layout is None:
        # transformers 5.21+ also looks for 4 channels (rgb_rules): asked only where it matters
        four = rules is not None and 4 in (array.shape[0], array.shape[2])
        channels = rules().array_channels if four and rules is not None else (1, 3)
        if array.shape[0] in channels:
            layout = CHANNELS_FIRST
        elif array.shape[2] in channels:
            layout = CHANNELS_LAST
        else:
            raise QwenInputError(
                f"cannot tell the channel axis of an array of shape {array.shape} "
                "(transformers' rule: first or last axis of size 1 or 3)"
            )
    if layout in (CHANNELS_FIRST, "first"):
        array = array.transpose(1, 2, 0)
    elif layout not in (CHANNELS_LAST, "last"):
        raise QwenInputError(f"unsupported input_data_format {input_data_format!r}")
    if array.shape[2] != 3:
        raise QwenInputError(
            f"pixel arrays must have 3 channels, got shape {array.shape} (channels last); "
            "convert to RGB first"
        )
    check_pixel_count(int(array.shape[1]), int(array.shape[0]))
    return array


def to_rgb(
    obj: Any,
    *,
    do_convert_rgb: bool = True,
    input_data_format: str | None = None,
    rules: RulesSource | None = None,
) -> Image.Image | np.ndarray:
    """An RGB ``PIL.Image`` (for PIL inputs) or an HWC uint8 array view (arrays, tensors).

    ``rules`` (asked only for transparent images and arrays with a 4-long axis) says how the
    mirrored transformers converts those; None: Pillow's convert("RGB") and (1, 3) channels.
    """
    obj = _unwrap(obj)
    if isinstance(obj, Image.Image):
        check_pixel_count(*obj.size)
        try:
            obj.load()  # lazily opened files fail here, not later inside a resize thread
        except Image.DecompressionBombError as exc:
            raise QwenImageTooLargeError(str(exc)) from exc
        except (OSError, SyntaxError, ValueError) as exc:
            raise QwenInputError(f"cannot decode image: {exc}") from exc
        transparent = do_convert_rgb and rules is not None and has_transparency(obj)
        if obj.mode == "RGB" and not transparent:
            return obj
        if not do_convert_rgb:
            raise QwenInputError(
                f"image mode {obj.mode!r} with do_convert_rgb=False: only RGB is supported"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                return convert(obj, rules().transparency if transparent and rules else DROP)
        except Image.DecompressionBombError as exc:
            raise QwenImageTooLargeError(str(exc)) from exc
        except QwenInputError:
            raise
        except (OSError, ValueError) as exc:
            message = f"cannot convert image of mode {obj.mode!r} to RGB: {exc}"
            raise QwenInputError(message) from exc
    if isinstance(obj, np.ndarray):
        return _array_to_hwc(obj, input_data_format, rules)
    if _is_tensor(obj):
        if obj.is_floating_point() or obj.is_complex():
            raise QwenInputError(
                f"pixel tensors must be uint8, got dtype {obj.dtype}; convert floats to uint8 "
                "yourself"
            )
        return _array_to_hwc(host_numpy(obj, QwenInputError), input_data_format, rules)
    raise QwenInputError(_type_message(obj))


def image_size(image: Image.Image | np.ndarray) -> tuple[int, int]:
    """(height, width) of what ``to_rgb`` returned."""
    if isinstance(image, Image.Image):
        return image.size[1], image.size[0]
    return int(image.shape[0]), int(image.shape[1])
