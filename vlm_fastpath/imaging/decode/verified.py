"""The rule table: which codec library decodes which input exactly like Pillow.

A fast decoder is used only where a row here matches the running process: the Pillow release
and the codec library it bundles (the reference), the binding and its version, and the input
variant. Each row was proven by ``tests/imaging/test_decode*.py`` (pixel identity over a
generated corpus, hypothesis over sizes and qualities, bad input). Anything without a row,
including a newer release of either side, decodes with Pillow. Add a row only after running
those tests against the new versions.

``faster`` is the benchmark's verdict (``benchmarks/decode.py``, results in
``benchmarks/results/decode.md``) on the image as the engine gets it (``decoded_image``: the
decoder's array, Pillow's store unfilled): a row that is exact but not faster is used only
with ``VLM_FASTPATH_FAST_DECODE=all``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One proven combination: ``library==version`` decodes ``variant`` like ``pillow``."""

    variant: str  # "jpeg-ycbcr", "jpeg-gray", "jpeg-parts", "png-8bit", "png-deflate", ...
    library: str  # distribution name: "simplejpeg", "imagecodecs"
    version: str  # exact version string of the distribution
    pillow: str  # Pillow release (its bundled codecs are the reference)
    pillow_codec: tuple[str, str]  # (PIL.features name, version) of Pillow's own decoder
    faster: bool = True  # measured faster than Pillow's decode, as the engine gets the image


PILLOW_13 = "13.0.0"

RULES: tuple[Rule, ...] = (
    # libjpeg-turbo 3.1.x (simplejpeg) against Pillow's 3.2.0: both run the accurate integer
    # IDCT and fancy upsampling; baseline, progressive, restart markers, 4:2:0/4:2:2/4:4:4.
    # The same library as Pillow's, so the gain is Pillow's 4-byte store not written (the
    # hand-off, decoded_image): 1.08-1.30x alone, 0.81-0.94x where a consumer then fills
    # that store (neither vlm-fastpath's processors nor numpy do).
    Rule("jpeg-ycbcr", "simplejpeg", "1.9.0", PILLOW_13, ("libjpeg_turbo", "3.2.0")),
    Rule("jpeg-gray", "simplejpeg", "1.9.0", PILLOW_13, ("libjpeg_turbo", "3.2.0")),
    # The same library on the parts of a restart-marked jpeg-ycbcr image (jpeg_parts):
    # 4:2:0, 4:2:2, 4:4:4, restart intervals of rows and of blocks, cuts at every allowed
    # row. Two parts on 2 cores: 4032x3024 4:2:0 34 -> 20 ms, 2048² 11.7 -> 7.2 ms.
    Rule("jpeg-parts", "simplejpeg", "1.9.0", PILLOW_13, ("libjpeg_turbo", "3.2.0")),
    # libpng 1.6.55 (imagecodecs): 8-bit L/LA/RGB/RGBA, interlaced or not, without tRNS.
    Rule("png-8bit", "imagecodecs", "2026.3.6", PILLOW_13, ("zlib_ng", "2.3.3")),
    # libdeflate 1.25 (imagecodecs) inflates, our kernel unfilters (png_rows): 8-bit
    # L/LA/RGB/RGBA, not interlaced, without tRNS; every filter type.
    Rule("png-deflate", "imagecodecs", "2026.3.6", PILLOW_13, ("zlib_ng", "2.3.3")),
    # libwebp 1.6.0 on both sides: lossy and lossless, with and without alpha, one frame.
    Rule("webp-still", "imagecodecs", "2026.3.6", PILLOW_13, ("webp", "1.6.0")),
)


def find(
    variant: str, library: str, version: str, pillow: str, codec_versions: dict[str, str | None]
) -> Rule | None:
    """The row proving this combination, or None (then Pillow decodes)."""
    for rule in RULES:
        if (rule.variant, rule.library, rule.version, rule.pillow) != (
            variant, library, version, pillow
        ):
            continue
        name, wanted = rule.pillow_codec
        if codec_versions.get(name) == wanted:
            return rule
    return None
