"""vLLM ``vllm.multimodal.media.image``: bad-image errors that escape as 500 become 400s.

vllm-image-loader-client-errors
    Why: ``ImageMediaIO.load_bytes`` maps ``OSError`` (and on 0.33 ``SyntaxError``) to
    ``ValueError``, the exception vLLM's server answers with HTTP 400; Pillow's
    ``DecompressionBombError`` (and before 0.33 a broken PNG chunk's ``SyntaxError``) is not
    an ``OSError``, so it reaches the server as an internal error (HTTP 500).
    How: ``load_bytes`` calls the release's and re-raises exactly those two exception types as
    ``ValueError`` with vLLM's own wording (``Failed to load image: ...``), chained to the
    original. Images that load, and every other error, are the release's.
    Upstream: none. Applies to: vLLM >=0.20, open-ended (0.15-0.19's ``load_bytes`` has no
    ``try``: their other bad images are no ``ValueError`` either); stands aside where
    ``load_bytes`` already names ``DecompressionBombError``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...core.base import Patch, PatchContext, source_text
from ...core.registry import register

MEDIA_IMAGE = "vllm.multimodal.media.image"


def client_error_types() -> tuple[type[BaseException], ...]:
    """Decoder errors that are the client's fault but are not ``OSError``."""
    from PIL import Image

    return (Image.DecompressionBombError, SyntaxError)


def make_load_bytes(original: Any) -> Any:
    """``load_bytes`` that reports every undecodable image as vLLM's ``ValueError``."""
    escaping = client_error_types()

    @functools.wraps(original)
    def load_bytes(self: Any, data: bytes) -> Any:
        try:
            return original(self, data)
        except escaping as exc:
            raise ValueError(f"Failed to load image: {exc}") from exc

    return load_bytes


@register
class ImageLoaderClientErrorsPatch(Patch):
    name = "vllm-image-loader-client-errors"
    engine = "vllm"
    versions = ">=0.20"
    trigger = MEDIA_IMAGE
    modules = (MEDIA_IMAGE,)
    upstream_pr = ""
    summary = "a decompression-bomb (or broken-chunk) image is a 400 ValueError, not a 500"

    def upstream_equivalent(self) -> str | None:
        io_cls = getattr(sys.modules[MEDIA_IMAGE], "ImageMediaIO", None)
        load = getattr(io_cls, "load_bytes", None)
        if load is not None and "DecompressionBombError" in source_text(load):
            return "ImageMediaIO.load_bytes handles DecompressionBombError itself"
        return None

    def not_needed(self) -> str | None:
        io_cls = getattr(sys.modules[MEDIA_IMAGE], "ImageMediaIO", None)
        if io_cls is None or "load_bytes" not in io_cls.__dict__:
            return f"{MEDIA_IMAGE} has no ImageMediaIO.load_bytes"
        return None

    def apply(self, ctx: PatchContext) -> None:
        io_cls = sys.modules[MEDIA_IMAGE].ImageMediaIO
        ctx.set_attr(io_cls, "load_bytes", make_load_bytes(io_cls.__dict__["load_bytes"]))
