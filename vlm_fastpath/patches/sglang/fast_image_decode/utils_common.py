"""SGLang ``sglang.srt.utils.common``: exact fast decoding of images loaded on the CPU path.

sglang-fast-image-decode
    Why: Pillow's decode dominates an image's CPU time once preprocessing is fast; codec
    libraries proven identical to Pillow are faster (benchmarks/results/decode.md).
    How: the module global ``_fully_load_pil_image`` (what ``_load_image`` calls on the image
    Pillow opened from the request's bytes, and ``load_image`` on a PIL image it is given)
    returns ``vlm_fastpath.imaging.decode.decode_opened``'s image where the decode layer takes
    the input, else SGLang's own function's result; faults fall back to it (contained).
    Upstream: none. Applies to: SGLang >=0.5.19, open-ended; stands aside where
    ``_load_image`` does not open with Pillow then call ``_fully_load_pil_image``, or no codec
    library is verified here.
"""

from __future__ import annotations

from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.containment import contained
from ...core.registry import register
from .._common import SGLANG_PREFIXES, module, source_of

COMMON = "sglang.srt.utils.common"
PATCH = "sglang-fast-image-decode"
LOADER = "_fully_load_pil_image"


def make_fully_load(original: Any) -> Any:
    """``_fully_load_pil_image`` answered by the exact fast decoder where it applies."""

    @contained(PATCH, original, user_errors=())
    def _fully_load_pil_image(image: Any) -> Any:
        from ....imaging.decode import decode_opened

        decoded = decode_opened(image)
        return original(image) if decoded is None else decoded

    _fully_load_pil_image.__wrapped__ = original  # type: ignore[attr-defined]
    _fully_load_pil_image.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return _fully_load_pil_image


@register
class FastImageDecodePatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.19"
    backport = False
    trigger = COMMON
    modules = (COMMON,)
    upstream_pr = ""
    summary = (
        "CPU image loading decodes JPEG/PNG/WebP with libjpeg-turbo/libpng/libwebp where "
        "proven pixel-identical to Pillow; Pillow for the rest"
    )

    def not_needed(self) -> str | None:
        if not callable(getattr(module(COMMON), "_load_image", None)):
            return f"{COMMON} has no _load_image"
        return None

    def contract(self) -> str | None:
        from ....imaging.decode import probe_mismatch, unavailable_reason

        common = module(COMMON)
        clause = signature_clause(common, LOADER, ("image",))
        if clause:
            return clause
        source = source_of(common._load_image)
        opened = source.find("Image.open(BytesIO(")
        loaded = source.find(f"{LOADER}(image)")
        if opened < 0 or not opened < loaded:
            return (
                f"structure: _load_image does not open the bytes with Image.open, then call "
                f"{LOADER}(image)"
            )
        reason = unavailable_reason()
        if reason:
            return f"dependency: {reason}"
        from PIL import Image

        return probe_mismatch(Image.open)

    def apply(self, ctx: PatchContext) -> None:
        common = module(COMMON)
        original = common.__dict__[LOADER]
        replacement = make_fully_load(original)
        ctx.set_attr(common, LOADER, replacement)
        ctx.rebind_globals(original, replacement, SGLANG_PREFIXES)
