"""vLLM ``vllm.multimodal.media.image``: exact fast decoding inside ``ImageMediaIO.load_bytes``.

vllm-fast-image-decode
    Why: Pillow's decode is most of an image's CPU time in the API server once the processor
    is fast; proven-identical codec libraries are faster (benchmarks/results/decode.md).
    How: the module global ``normalize_image`` (called by ``load_bytes`` on the image Pillow
    opened, after vLLM's pixel limit and budget) first decodes the image with
    ``vlm_fastpath.imaging.decode.decode_opened`` and passes the decoded image to vLLM's own
    ``normalize_image``; inputs the decode layer declines keep vLLM's path, faults fall back
    to it (contained).
    Upstream: none. Applies to: vLLM >=0.24, open-ended; stands aside where ``load_bytes``
    does not open then normalize, or no codec library is verified here.
"""

from __future__ import annotations

import sys
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause, source_text
from ...core.containment import contained
from ...core.registry import register

MEDIA_IMAGE = "vllm.multimodal.media.image"
PATCH = "vllm-fast-image-decode"


def make_normalize_image(original: Any) -> Any:
    """``normalize_image`` that decodes fast first; vLLM's own function does the rest."""

    @contained(PATCH, original, user_errors=())
    def normalize_image(image: Any) -> Any:
        from ....imaging.decode import decode_opened

        decoded = decode_opened(image)
        return original(image if decoded is None else decoded)

    normalize_image.__wrapped__ = original  # type: ignore[attr-defined]
    normalize_image.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return normalize_image


@register
class FastImageDecodePatch(Patch):
    name = PATCH
    engine = "vllm"
    versions = ">=0.24"
    backport = False
    trigger = MEDIA_IMAGE
    modules = (MEDIA_IMAGE,)
    upstream_pr = ""
    summary = (
        "ImageMediaIO.load_bytes decodes JPEG/PNG/WebP with libjpeg-turbo/libpng/libwebp "
        "where proven pixel-identical to Pillow; Pillow for the rest"
    )

    def not_needed(self) -> str | None:
        io_cls = getattr(sys.modules[MEDIA_IMAGE], "ImageMediaIO", None)
        if io_cls is None or "load_bytes" not in io_cls.__dict__:
            return f"{MEDIA_IMAGE} has no ImageMediaIO.load_bytes"
        return None

    def contract(self) -> str | None:
        from ....imaging.decode import probe_mismatch, unavailable_reason

        media = sys.modules[MEDIA_IMAGE]
        clause = signature_clause(media, "normalize_image", ("image",))
        if clause:
            return clause
        source = source_text(media.ImageMediaIO.__dict__["load_bytes"])
        opened = max(source.find("open_image("), source.find("Image.open("))
        normalized = source.find("normalize_image(image)")
        loaded = source.find("image.load()")
        if opened < 0 or not opened < normalized < loaded:
            return (
                "structure: ImageMediaIO.load_bytes does not open the image, then "
                "normalize_image(image), then image.load()"
            )
        reason = unavailable_reason()
        if reason:
            return f"dependency: {reason}"
        opener = getattr(media, "open_image", None)
        if opener is None:
            from PIL import Image

            def opener(fp: Any) -> Any:
                return Image.open(fp)

        return probe_mismatch(opener)

    def apply(self, ctx: PatchContext) -> None:
        media = sys.modules[MEDIA_IMAGE]
        original = media.__dict__["normalize_image"]
        ctx.set_attr(media, "normalize_image", make_normalize_image(original))
