"""Inputs that really resize (small patch limits), shared by in-process tests and scripts.

Importable without pytest; builds inputs only and never imports ``vlm_fastpath``.
"""

from __future__ import annotations

from PIL import Image

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG

from .helpers import img, rand_array, video

SMALL = dict(KIMI_K25_CFG, in_patch_limit=300)  # anything above ~240x240 downscales
SMALL_CLIP = dict(CLIP_CFG, in_patch_limit=300)


def batches() -> dict[str, list[dict]]:
    """A single image, a taller-than-100:1 image and a mixed batch with a video chunk."""
    frames = [Image.fromarray(rand_array(20 + i, 400, 300)) for i in range(3)]
    return {
        "single": [img(Image.fromarray(rand_array(1, 900, 700)))],
        "tall": [img(Image.fromarray(rand_array(2, 5, 2000)))],
        "batch": [img(Image.fromarray(rand_array(3, 641, 479))), video(frames),
                  img(Image.fromarray(rand_array(4, 29, 27)))],
    }
