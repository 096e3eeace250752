"""vLLM's image loader answers a decompression bomb with a 400, like every other bad image.

Why: ``ImageMediaIO.load_bytes`` turns Pillow's decode errors into ``ValueError`` (which the
OpenAI server maps to HTTP 400) by catching ``OSError``/``UnidentifiedImageError`` (0.20+; 0.33
also ``SyntaxError``). ``Image.open`` rejects an image above
``2 * PIL.Image.MAX_IMAGE_PIXELS`` with ``DecompressionBombError``, which is neither: it
escapes, and the client gets an HTTP 500 for its own bad input (with or without vlm-fastpath).
Before 0.33 the ``SyntaxError`` of a broken PNG chunk escapes the same way.
How: ``multimodal_media_image`` wraps ``ImageMediaIO.load_bytes`` (``load_base64`` and
``load_file`` go through it) and re-raises those two as ``ValueError("Failed to load image:
...")``, vLLM's own message for a bad image; every other outcome is the release's.
Upstream PR: none.
Versions: vLLM >=0.20, open-ended; stands aside ("upstream") once ``load_bytes`` handles
``DecompressionBombError`` itself. Not 0.15-0.19: their ``load_bytes`` catches nothing and
decodes lazily, so a garbage or truncated image is no ``ValueError`` there either (only
``MediaConnector.fetch_image`` maps ``UnidentifiedImageError``): no "every other bad image" to
match.
Delete when: vLLM's loader maps ``DecompressionBombError`` to a client error itself.
"""

PATCH_MODULES = ("multimodal_media_image",)
