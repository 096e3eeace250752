"""The probe's bad inputs, built in memory (shared by the core, engine and serving suites)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A tiny PNG whose header declares ``width x height`` 1-bit pixels.

    Above ``2 * Image.MAX_IMAGE_PIXELS`` (default 178,956,970) ``Image.open`` raises
    ``DecompressionBombError`` from the header alone; the file is a few dozen bytes.
    """
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    body = zlib.compress(b"\x00" * 16)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", body)
            + _chunk(b"IEND", b""))


def photo(width: int = 96, height: int = 64, seed: int = 0) -> Image.Image:
    """A smooth RGB image (JPEG-friendly)."""
    y, x = np.mgrid[0:height, 0:width]
    rng = np.random.default_rng(seed)
    base = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)),
                     ((x + y) * 127 // max(1, width + height - 2))], axis=-1)
    noise = rng.integers(0, 8, (height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def jpeg_bytes(width: int = 96, height: int = 64, seed: int = 0, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    photo(width, height, seed).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(width: int = 96, height: int = 64, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    photo(width, height, seed).save(buf, format="PNG")
    return buf.getvalue()


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    """The first ``keep`` of ``data``: the header parses, the pixels do not."""
    return data[: max(64, int(len(data) * keep))]


def garbage() -> bytes:
    return b"this is not an image at all" * 4
