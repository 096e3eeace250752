"""A non-interlaced 8-bit PNG decoded as libdeflate inflate plus our unfilter kernel.

Why (issue #51): inflating the image data is most of a PNG decode, and libdeflate (bundled by
imagecodecs) inflates a photograph's stream faster than the zlib inside libpng and zlib-ng
inside Pillow (``benchmarks/results/decode.md``). libdeflate inflates a whole stream in one call, so
the rest of the decode -- undoing each row's filter -- is ours (``_numba_png_filters``);
nothing else about the format is: the layout was checked from the header by ``variants``
(8-bit L/LA/RGB/RGBA, not interlaced, no chunk that changes pixels, nothing after the data).
How: the IDAT bodies, joined, are inflated into a buffer of exactly the size the header says
(a row's filter byte plus its bytes, for every row); the rows are then unfiltered into
``out`` top to bottom. Anything off -- a stream that inflates to another length, a bad
Adler-32, an unknown filter type -- raises, and the layer lets Pillow decode (its errors, or
its image where Pillow accepts what we refuse: it checks no Adler-32).
"""

from __future__ import annotations

import importlib.util
import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import settings
from ..output_pool import empty_output
from .variants import png_chunks

Decoder = Callable[[bytes, np.ndarray], np.ndarray]


class PngRowsError(ValueError):
    """The image data is not what the header announced (the layer then lets Pillow decode)."""


def image_data(data: bytes) -> memoryview | bytes:
    """The IDAT bodies as one buffer: a view of ``data`` when there is one chunk, else one
    join that keeps the GIL (a copy per chunk that released it would wait for the GIL again
    after each, behind a busy event loop: up to the switch interval per chunk)."""
    view = memoryview(data)
    spans = [view[start:end] for kind, start, end in png_chunks(data) if kind == b"IDAT"]
    return spans[0] if len(spans) == 1 else b"".join(spans)


def warm_up(unfilters: dict[int, Callable[..., int]]) -> None:
    """Compile (or load from numba's cache) the unfilter of every pixel size at once, so a
    process's later PNGs of another mode do not each pay it."""
    for bpp, unfilter in unfilters.items():
        unfilter(np.zeros(2 * (bpp + 1), np.uint8), np.zeros((2, bpp), np.uint8))


_KERNELS: dict[str, Any] = {}
_KERNELS_LOCK = threading.Lock()


def ready() -> bool:
    """The kernels are loaded in this process (numba imported): decoding starts nothing new."""
    return "unfilter" in _KERNELS


def _unfilters() -> dict[int, Callable[..., int]]:
    """Imported on the first PNG decoded, not when the decoder is made: the decoder is made
    while an engine patch applies, which can be inside an engine process's start-up, and
    importing numba (llvmlite) there breaks vLLM 0.32's CPU worker, whose start-up scans
    every loaded module's attributes (llvmlite's ``ffi.lib`` answers any name)."""
    if not ready():
        with _KERNELS_LOCK:
            if not ready():
                from .. import _numba_png_filters as kernels

                warm_up(kernels.UNFILTER)
                _KERNELS["unfilter"] = kernels.UNFILTER
    return _KERNELS["unfilter"]


def decoder() -> Decoder:
    """The decoder, or ImportError where numba is off or missing (``png-8bit`` then serves)."""
    if not settings.numba_allowed():
        raise ImportError("numba is switched off (VLM_FASTPATH_NUMBA=0)")
    if importlib.util.find_spec("numba") is None:
        raise ImportError("numba is not installed")
    import imagecodecs

    inflate: Any = imagecodecs.deflate_decode

    def decode(data: bytes, out: np.ndarray) -> np.ndarray:
        width, height = struct.unpack_from(">II", data, 16)
        rows = out.reshape(height, -1)
        stride = rows.shape[1]
        if stride % width or not 1 <= stride // width <= 4:
            raise PngRowsError(f"a {out.shape} output does not hold {width}x{height} pixels")
        unfilter = _unfilters()[stride // width]
        raw = empty_output((height * (stride + 1),), np.uint8)
        stream = image_data(data)
        got = inflate(stream, out=memoryview(raw))
        if len(got) != raw.size:
            raise PngRowsError(f"the image data inflates to {len(got)} bytes, not {raw.size}")
        bad = unfilter(raw, rows)
        if bad >= 0:
            raise PngRowsError(f"row {bad} has an unknown filter type {raw[bad * (stride + 1)]}")
        return out

    return decode
