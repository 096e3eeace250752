"""Turn whatever a caller hands us into an RGB ``PIL.Image``, exactly as the checkpoint does.

The checkpoint's processor calls ``image.convert("RGB")`` (alpha dropped, no compositing), so
every mode goes through that one call. Arrays and tensors must already be uint8 pixels: a float
tensor has no single right mapping to bytes, so it is refused rather than guessed at.
"""

from __future__ import annotations

import io
import os
import warnings
from typing import Any

import numpy as np
from PIL import Image

from .._tensors import host_numpy
from ..imaging.image_input import check_pixel_count as _check_pixel_count
from ..imaging.image_input import is_tensor as _is_tensor
from ..imaging.image_input import unwrap as _unwrap
from ..imaging.resample import InputRules
from .errors import ImageTooLargeError, KimiInputError

_ARRAY_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def check_pixel_count(width: int, height: int) -> None:
    """Pillow's zero-size and decompression-bomb rule, with Kimi's error classes."""
    _check_pixel_count(width, height, input_error=KimiInputError, limit_error=ImageTooLargeError)


def open_encoded(data: bytes | bytearray | memoryview | str | os.PathLike[str]) -> Image.Image:
    """Open encoded bytes or a file path lazily (header only), with clear errors."""
    source: Any = data
    if isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) == 0:
            raise KimiInputError("image bytes are empty")
        source = io.BytesIO(bytes(data))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(source)
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(f"encoded image rejected by Pillow: {exc}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise KimiInputError(f"cannot decode image: {exc}") from exc
    check_pixel_count(*image.size)
    return image


def dtype_advice(kind: str) -> str:
    """How to turn pixels of a numpy dtype ``kind`` (``"f"``, ``"b"``, ``"i"``...) into uint8."""
    if kind == "b":
        return "boolean masks have no pixel scale; map them to 0/255 uint8 yourself"
    if kind in "iu":
        return (
            "clip and cast integer pixels to uint8 yourself (values outside 0..255 are "
            "ambiguous)"
        )
    return "convert floats to uint8 yourself (there is no single right rescaling)"


def _array_to_image(array: np.ndarray) -> Image.Image:
    if array.dtype != np.uint8:
        raise KimiInputError(
            f"pixel arrays must be uint8 HWC, got dtype {array.dtype}; "
            f"{dtype_advice(array.dtype.kind)}"
        )
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in _ARRAY_MODES:
        raise KimiInputError(
            f"pixel arrays must be HxW, HxWx1, HxWx3 or HxWx4 uint8, got shape {array.shape}"
        )
    height, width, channels = array.shape
    check_pixel_count(width, height)
    mode = _ARRAY_MODES[channels]
    squeezed = array[:, :, 0] if channels == 1 else array
    return Image.fromarray(np.ascontiguousarray(squeezed), mode=mode)


def image_size(obj: Any) -> tuple[int, int]:
    """(width, height) of an input without decoding or converting its pixels."""
    obj = _unwrap(obj)
    if isinstance(obj, Image.Image):
        return obj.size
    if isinstance(obj, np.ndarray) or _is_tensor(obj):
        shape = tuple(obj.shape)
        if len(shape) < 2:
            raise KimiInputError(f"pixel arrays must be at least 2-D, got shape {shape}")
        return int(shape[1]), int(shape[0])
    if isinstance(obj, (bytes, bytearray, memoryview, str, os.PathLike)):
        return open_encoded(obj).size
    raise KimiInputError(_type_message(obj))


def tensor_to_numpy(obj: Any) -> np.ndarray:
    """A host numpy view of a tensor's pixels, refusing tensors that hold no data."""
    return host_numpy(obj, KimiInputError)


def _type_message(obj: Any) -> str:
    return (
        f"unsupported image type {type(obj).__name__}: expected PIL.Image.Image, a uint8 HWC "
        "numpy array or torch tensor, encoded bytes, or a file path"
    )


def to_rgb_image(obj: Any) -> Image.Image:
    """Return an RGB image with the checkpoint's pixels (``convert("RGB")``)."""
    obj = _unwrap(obj)
    if isinstance(obj, Image.Image):
        image = obj
        check_pixel_count(*image.size)
    elif isinstance(obj, np.ndarray):
        image = _array_to_image(obj)
    elif _is_tensor(obj):
        if obj.is_floating_point() or obj.is_complex():
            raise KimiInputError(
                f"pixel tensors must be uint8 HWC, got dtype {obj.dtype}; {dtype_advice('f')}"
            )
        image = _array_to_image(tensor_to_numpy(obj))
    elif isinstance(obj, (bytes, bytearray, memoryview, str, os.PathLike)):
        image = open_encoded(obj)
    else:
        raise KimiInputError(_type_message(obj))
    if image.mode == "RGB":
        return image
    try:
        return image.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise KimiInputError(f"cannot convert image of mode {image.mode!r} to RGB: {exc}") from exc


KIMI_INPUT = InputRules(to_rgb=to_rgb_image, check_size=check_pixel_count,
                        input_error=KimiInputError)
"""Kimi's rules for the shared resampler: its conversion, its pixel limit, its errors."""
