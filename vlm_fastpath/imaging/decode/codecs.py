"""The codec bindings, imported lazily: ``decode(data, out)`` fills ``out`` or raises.

Adapters are thin on purpose: no decoding of our own (but ``png_rows``, whose library inflates
and whose rows we unfilter), only the call that makes the library produce what Pillow
produces (the accurate IDCT and fancy upsampling for libjpeg-turbo, strict mode so a libjpeg
warning such as a premature end of data raises instead of padding).
``out`` is a scratch array of the shape Pillow's header announces; a library that wants
another shape raises, and Pillow decodes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import metadata

import numpy as np

Decoder = Callable[[bytes, np.ndarray], np.ndarray]


@functools.cache
def installed(distribution: str) -> str | None:
    """Version of an installed distribution that also imports, else None."""
    try:
        version = metadata.version(distribution)
        __import__(distribution)
    except Exception:  # noqa: BLE001 - missing or broken: Pillow decodes
        return None
    return version


def jpeg_simplejpeg(gray: bool) -> Decoder:
    import simplejpeg

    colorspace = "GRAY" if gray else "RGB"

    def decode(data: bytes, out: np.ndarray) -> np.ndarray:
        return simplejpeg.decode_jpeg(
            data, colorspace=colorspace, fastdct=False, fastupsample=False, strict=True,
            buffer=out,
        )

    return decode


def png_imagecodecs() -> Decoder:
    import imagecodecs

    def decode(data: bytes, out: np.ndarray) -> np.ndarray:
        return imagecodecs.png_decode(data, out=out)

    return decode


def _png_rows() -> Decoder:
    from .png_rows import decoder

    return decoder()


def webp_imagecodecs() -> Decoder:
    import imagecodecs

    def decode(data: bytes, out: np.ndarray) -> np.ndarray:
        return imagecodecs.webp_decode(data, hasalpha=out.shape[-1] == 4, out=out)

    return decode


# variant -> (library, factory of its decoder)
ADAPTERS: dict[str, tuple[str, Callable[[], Decoder]]] = {
    "jpeg-ycbcr": ("simplejpeg", lambda: jpeg_simplejpeg(gray=False)),
    "jpeg-gray": ("simplejpeg", lambda: jpeg_simplejpeg(gray=True)),
    # a restart-marked jpeg-ycbcr image decoded in parts on several cores (jpeg_parts)
    "jpeg-parts": ("simplejpeg", lambda: jpeg_simplejpeg(gray=False)),
    "png-8bit": ("imagecodecs", png_imagecodecs),
    # a non-interlaced png-8bit image: libdeflate inflates, our kernel unfilters (png_rows)
    "png-deflate": ("imagecodecs", _png_rows),
    "webp-still": ("imagecodecs", webp_imagecodecs),
}
