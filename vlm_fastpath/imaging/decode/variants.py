"""Which variant an opened image is, read from its header only (never its pixel data).

A non-interlaced 8-bit PNG is ``png-deflate`` (``png_rows``: libdeflate and our unfilter),
and ``png-8bit`` (libpng) where that is not in use; an interlaced one is ``png-8bit``.

``variant`` answers None for anything the rule table must not see: CMYK/YCCK or RGB-coded
JPEGs, palette, 16-bit, sub-byte, tRNS or animated PNGs, animated WebPs, every other format.
PNG also needs its chunk list to end at ``IEND`` with nothing but ``IEND`` after the image
data: chunks there (``eXIf``, text) are read by Pillow's ``load`` into ``info`` and would make
the two images' metadata (and EXIF orientation) differ.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from PIL import Image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_MODES = {0: "L", 2: "RGB", 4: "LA", 6: "RGBA"}  # colour type -> Pillow mode at 8 bits
_VP8X_ALPHA_OR_FRAMES = 0x10 | 0x02  # a WebP VP8X chunk's alpha and animation flags
_PNG_PIXEL_CHUNKS = frozenset({b"PLTE", b"tRNS", b"acTL", b"fcTL", b"fdAT"})


# where a variant's decoder is not in use here, the one that decodes the same input instead
FALLBACK = {"png-deflate": "png-8bit"}


def variant(image: Image.Image, data: bytes) -> str | None:
    fmt = image.format
    if fmt == "JPEG":
        return _jpeg(image, data)
    if fmt == "PNG":
        return _png(image, data)
    if fmt == "WEBP":
        return _webp(image, data)
    return None


def _jpeg(image: Image.Image, data: bytes) -> str | None:
    if not data.startswith(b"\xff\xd8") or image.mode not in ("RGB", "L"):
        return None
    try:
        import simplejpeg

        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except Exception:  # noqa: BLE001 - header the library cannot read: Pillow decodes
        return None
    if (width, height) != image.size:
        return None
    if image.mode == "RGB" and colorspace == "YCbCr":
        return "jpeg-ycbcr"
    if image.mode == "L" and colorspace == "Gray":
        return "jpeg-gray"
    return None


def _png(image: Image.Image, data: bytes) -> str | None:
    if not data.startswith(PNG_SIGNATURE) or len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width, height, depth, colour, _, _, _ = struct.unpack(">IIBBBBB", data[16:29])
    if depth != 8 or _PNG_MODES.get(colour) != image.mode or (width, height) != image.size:
        return None
    if not _png_chunks_plain(data):
        return None
    compression, filtering, interlace = data[26:29]
    return "png-deflate" if (compression, filtering, interlace) == (0, 0, 0) else "png-8bit"


def png_chunks(data: bytes) -> Iterator[tuple[bytes, int, int]]:
    """``(type, body start, body end)`` of each chunk after the signature, in order, up to
    the first that does not fit in ``data``."""
    pos, end = len(PNG_SIGNATURE), len(data)
    while pos + 12 <= end:
        (length,) = struct.unpack_from(">I", data, pos)
        nxt = pos + 12 + length
        if nxt > end:
            return
        yield data[pos + 4 : pos + 8], pos + 8, pos + 8 + length
        pos = nxt


def _png_chunks_plain(data: bytes) -> bool:
    """Chunks walk to ``IEND`` at the end; nothing alters pixels; nothing follows the data."""
    seen_idat = False
    for kind, _, body_end in png_chunks(data):
        if kind == b"IEND":
            return seen_idat and body_end + 4 == len(data)
        if kind in _PNG_PIXEL_CHUNKS:
            return False
        if kind == b"IDAT":
            seen_idat = True
        elif seen_idat:
            return False  # a chunk after the image data: Pillow's load reads it into info
    return False


def rows_in_order(variant: str, data: bytes) -> bool:
    """The variant's decoder writes each output row once, top to bottom (what
    ``row_progress`` needs): JPEG (a progressive one too: its rows come out in one last
    pass), PNG unless interlaced (Adam7 writes rows in seven passes), and WebP without an
    alpha chunk (libwebp emits a lossy image's rows once filtered and upsampled, a lossless
    one's once transformed; a lossy image's alpha plane is written over its rows after them)."""
    if variant in ("jpeg-ycbcr", "jpeg-gray"):
        return True
    if variant == "webp-still":
        return _webp_rows_in_order(data)
    if variant == "png-deflate":
        return True
    return variant == "png-8bit" and len(data) > 28 and data[28] == 0


def _webp_rows_in_order(data: bytes) -> bool:
    chunk = data[12:16]
    if chunk in (b"VP8 ", b"VP8L"):
        return True
    # extended format: its flags byte says whether alpha or frames may follow
    return chunk == b"VP8X" and len(data) > 20 and not data[20] & _VP8X_ALPHA_OR_FRAMES


def _webp(image: Image.Image, data: bytes) -> str | None:
    if not (data.startswith(b"RIFF") and data[8:12] == b"WEBP"):
        return None
    if getattr(image, "n_frames", 1) != 1 or image.mode not in ("RGB", "RGBA"):
        return None
    return "webp-still"
