"""Exact image decoding through maintained codec libraries, Pillow everywhere else.

Why: once the processor is fast, decoding is most of an image's CPU time in the API server
(issue #30): libjpeg-turbo (simplejpeg), libpng and libwebp (imagecodecs) decode the same
bytes to the same pixels faster than Pillow (benchmarks/results/decode.md).
How: the engine opens the image with Pillow as it always does (format allowlist, pixel limits,
decompression-bomb checks, header errors); ``decode_opened`` then decodes the pixel data with
the library a row of ``verified.RULES`` proves identical for this variant and these versions,
and gives back what Pillow's ``load()`` would, as a ``DecodedImage`` whose pixels stay the
decoder's 3-channel array until something needs Pillow's own store (``decoded_image``).
Everything else -- CMYK/YCCK JPEGs, palette, 16-bit and tRNS PNGs, animated images, other
formats, unverified versions, inputs the library refuses -- is decoded by Pillow, so outcomes
and error messages stay the engine's.
From 2 MP, a JPEG, a non-interlaced PNG or a WebP without alpha is decoded while the
processor an engine patch offered (``speculation``) resizes and patchifies the rows already
written (``row_progress``); the decoded image carries that output to the processor's call,
which takes it only for its own settings. The loader still returns after the whole decode, so
its errors are unchanged.
The libraries are the optional extra ``vlm-fastpath[decode]``; without them Pillow decodes.
"""

from .layer import (
    ENV_SWITCH,
    available,
    decode_bytes,
    decode_opened,
    probe_mismatch,
    unavailable_reason,
)

__all__ = [
    "ENV_SWITCH",
    "available",
    "decode_bytes",
    "decode_opened",
    "probe_mismatch",
    "unavailable_reason",
]
