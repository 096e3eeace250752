"""Prove a mirror of a transformers Qwen-VL image processor exact before it is used.

``hf_config.config_from_hf`` reads the settings (and which arithmetic, torchvision or PIL) off
a live transformers processor. ``check_compatible`` then runs small probe images through both, with
upscaling, downscaling, float32 and uint8 output, a mixed batch and a batch of transparent and
palette images (alpha bands, tRNS entries: transformers 5.21 began compositing those onto
white), and returns a reason when anything differs: a transformers, torchvision, torch or
Pillow release that changed behaviour makes the engine patches stand aside instead of silently
serving different pixels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .config import QwenImageConfig
from .errors import QwenProcessorError
from .processor import FastQwen2VLImageProcessor


def _probe_images() -> list[Any]:
    from PIL import Image

    rng = np.random.RandomState(1234)
    sizes = ((37, 53), (157, 211), (3, 170))  # (height, width): up-, down-scale, thin
    images = []
    for height, width in sizes:
        pixels = rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8)
        images.append(Image.fromarray(pixels))
    return images


def _transparent_probes() -> list[Any]:
    """Every kind of image whose conversion to RGB transformers changed: alpha bands (RGBA, LA,
    PA, premultiplied RGBa), palettes with one transparent index or per-index alpha, RGB and L
    with a tRNS colour, and an opaque palette; partial alpha, 0 and 255 all present."""
    from PIL import Image

    rng = np.random.RandomState(4321)
    height, width = 45, 61
    rgba = rng.randint(0, 256, size=(height, width, 4)).astype(np.uint8)
    rgba[0, :5, 3] = (0, 255, 0, 255, 1)
    rgba_image = Image.fromarray(rgba)
    palette = Image.fromarray(rgba[..., :3]).quantize(colors=64)
    one_index = palette.copy()
    one_index.info["transparency"] = int(np.asarray(palette)[0, 0])
    per_index = palette.copy()
    per_index.info["transparency"] = bytes(rng.randint(0, 256, size=64).astype(np.uint8))
    rgb = Image.fromarray(rgba[..., :3])
    rgb.info["transparency"] = tuple(int(v) for v in rgba[1, 1, :3])
    gray = rgb.convert("L")
    gray.info["transparency"] = int(np.asarray(gray)[2, 2])
    return [rgba_image, rgba_image.convert("LA"), rgba_image.convert("PA"),
            rgba_image.convert("RGBa"), one_index, per_index, rgb, gray, palette]


def _probe_calls(config: QwenImageConfig) -> list[dict[str, Any]]:
    # A small max_pixels forces a downscale whatever the checkpoint's limits are.
    factor = config.factor
    small = {"shortest_edge": factor * factor, "longest_edge": (4 * factor) ** 2}
    return [
        {},
        {"size": small},
        {"size": small, "do_rescale": False, "do_normalize": False},
        {"do_rescale": True, "do_normalize": False},
        # a lone per-call limit: transformers before 5.18 ignores it (rgb_rules follows that)
        {"min_pixels": min(4 * config.min_pixels, config.max_pixels)},
    ]


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))


def check_compatible(hf_processor: Any, fast: Any = None) -> str | None:
    """None when our processor reproduces ``hf_processor`` exactly on the probes, else why not.

    Cheap (small images only): meant to run once when an engine patch is applied.
    """
    try:
        if fast is None:
            fast = FastQwen2VLImageProcessor.from_hf(hf_processor)
    except QwenProcessorError as exc:
        return f"settings not reproduced: {exc}"
    images = _probe_images()
    transparent = _transparent_probes()
    for kwargs in _probe_calls(fast.config):
        for batch in ([images[0]], [images[1]], images, transparent):
            try:
                expected = hf_processor(images=list(batch), return_tensors="pt", **kwargs)
            except Exception as exc:  # noqa: BLE001 - any failure of theirs means stand aside
                return f"{type(hf_processor).__name__} failed on a probe ({kwargs}): {exc!r}"
            try:
                got = fast(images=list(batch), return_tensors="pt", **kwargs)
            except Exception as exc:  # noqa: BLE001
                return f"our processor failed on a probe ({kwargs}): {exc!r}"
            for key in ("pixel_values", "image_grid_thw"):
                want, have = _as_tensor(expected[key]), _as_tensor(got[key])
                if want.dtype != have.dtype or want.shape != have.shape:
                    return (
                        f"{key} differs on a probe ({kwargs}): {want.dtype}{tuple(want.shape)} "
                        f"vs ours {have.dtype}{tuple(have.shape)}"
                    )
                if not torch.equal(want, have):
                    diff = (want.double() - have.double()).abs().max().item()
                    return f"{key} differs on a probe ({kwargs}): max abs difference {diff}"
    return None
