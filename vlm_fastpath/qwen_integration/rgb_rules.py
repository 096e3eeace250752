"""What the mirrored transformers processor does where its releases differ, found by running it.

Why: transformers changed these between minors without notice. Up to 5.20 its
``convert_to_rgb`` is Pillow's ``convert("RGB")``: an alpha band is dropped and a palette's or
tRNS ``transparency`` is ignored. From 5.21 an image with an alpha band or a ``transparency``
entry is composited onto opaque white first, and 1- and 4-channel arrays are read too (which
moves the channel-axis guess for an array whose first axis is 4). Before 5.15 the PIL-backed
processor returns uint8 (not float32) when rescale and normalize are off; before 5.18 both
processors ignore a per-call ``min_pixels`` or ``max_pixels`` given alone (only the pair
overrides ``size``). A version string says none of this reliably (a backport, a patched
wheel, a subclass), so we run the processor we mirror on tiny uniform images (transparent
ones, a 4-channel array, an opaque one with a lone ``max_pixels``), once, and follow what it
did. Behaviour we do not recognise is refused per image or call
(``UnsupportedTransparencyError``, ``QwenConfigError``: the engine patches then answer with
the engine's own processor), never guessed.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from .config import QwenImageConfig
from .errors import QwenProcessorError, UnsupportedTransparencyError
from .hf_config import config_from_hf, mode_of
from .smart_resize import smart_resize

DROP = "drop"  # Pillow's convert("RGB"): alpha and ``transparency`` ignored (transformers <5.21)
WHITE = "white"  # composited onto opaque white first (transformers 5.21+)
UNKNOWN = "unknown"  # anything else: images with transparency are refused
_RULES = (DROP, WHITE)
HONOURED, IGNORED = "honoured", "ignored"  # a lone per-call min_pixels/max_pixels
_COLOR = (40, 80, 120)  # a probe colour no background rule can produce by accident


@dataclass(frozen=True)
class RgbRules:
    """What the mirrored processor does where transformers releases differ.

    ``transparency``: DROP, WHITE or UNKNOWN. ``array_channels``: the channel counts it looks
    for when it guesses an array's channel axis ((1, 3), or (1, 3, 4) where it reads RGBA
    arrays). ``unscaled_uint8``: its output is uint8 with rescale and normalize off (None:
    the mode's usual, float32 for PIL, uint8 for torchvision). ``lone_limits``: what a per-call
    ``min_pixels``/``max_pixels`` given alone does (HONOURED, IGNORED or UNKNOWN: refused).
    ``detail``: what each probe gave, for reasons and logs.
    """

    transparency: str = DROP
    array_channels: tuple[int, ...] = (1, 3)
    detail: str = "default: Pillow's convert('RGB'), no transformers probed"
    unscaled_uint8: bool | None = None
    lone_limits: str = HONOURED


PILLOW_DEFAULT = RgbRules()


def has_transparency(image: Image.Image) -> bool:
    """Whether transformers 5.21+ composites this image: an alpha band or a tRNS entry.

    ``getbands`` names premultiplied alpha ``a`` (modes RGBa, La): those are not composited.
    """
    return "A" in image.getbands() or image.info.get("transparency") is not None


def on_white(image: Image.Image) -> Image.Image:
    """``image`` composited onto opaque white with Pillow's own integer blend, as RGB."""
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def convert(image: Image.Image, rule: str) -> Image.Image:
    """An RGB image as the mirrored transformers makes it under ``rule``.

    Raises ``UnsupportedTransparencyError`` for a transparent image under UNKNOWN.
    """
    if rule != DROP and has_transparency(image):
        if rule == WHITE:
            return on_white(image)
        raise UnsupportedTransparencyError(
            f"image of mode {image.mode!r} has transparency, and the installed transformers "
            "converts transparent images in a way vlm-fastpath does not reproduce "
            "(neither Pillow's convert('RGB') nor a composite onto white)"
        )
    if image.mode == "RGB":
        return image
    return image.convert("RGB")


# -- probing ----------------------------------------------------------------------------------
def _probe_images(side: int) -> dict[str, Image.Image]:
    """Uniform, fully transparent images of every kind transformers 5.21+ composites."""
    r, g, b = _COLOR
    images = {
        "RGBA": Image.new("RGBA", (side, side), (r, g, b, 0)),
        "LA": Image.new("LA", (side, side), (r, 0)),
        "PA": Image.new("RGBA", (side, side), (r, g, b, 0)).convert("PA"),
    }
    palette = Image.new("P", (side, side), 0)
    palette.putpalette([r, g, b] * 256)
    palette.info["transparency"] = 0
    images["P+tRNS"] = palette
    rgb = Image.new("RGB", (side, side), _COLOR)
    rgb.info["transparency"] = _COLOR
    images["RGB+tRNS"] = rgb
    gray = Image.new("L", (side, side), r)
    gray.info["transparency"] = r
    images["L+tRNS"] = gray
    return images


def _uniform_rgb(pixel_values: Any) -> tuple[int, int, int] | None:
    """The one colour of a uniform image's patches ([C, T, P, P] per row), or None."""
    values = np.asarray(pixel_values)
    channels = values[0].reshape(3, -1)
    colour = []
    for channel in channels:
        found = np.unique(channel)
        if found.size != 1 or float(found[0]) != round(float(found[0])):
            return None
        colour.append(int(found[0]))
    return (colour[0], colour[1], colour[2])


def _uint8_call(hf_processor: Any, images: list[Any]) -> Any:
    return hf_processor(images=images, return_tensors="pt", do_resize=False,
                        do_rescale=False, do_normalize=False)


def probe(hf_processor: Any, config: QwenImageConfig | None = None) -> RgbRules:
    """Run ``hf_processor`` (whose settings are ``config``, read off it when None) on the
    probes and name what it did (a few small calls)."""
    if config is None:
        config = config_from_hf(hf_processor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow warns on palette transparency
        return _probe(hf_processor, config)


def _probe(hf_processor: Any, config: QwenImageConfig) -> RgbRules:
    side = config.factor
    seen: dict[str, str] = {}
    for kind, image in _probe_images(side).items():
        try:
            theirs = _uniform_rgb(_uint8_call(hf_processor, [image])["pixel_values"])
        except Exception as exc:  # noqa: BLE001 - a failure is a behaviour we do not follow
            seen[kind] = f"failed ({type(exc).__name__})"
            continue
        matches = [rule for rule in _RULES if convert(image, rule).getpixel((0, 0)) == theirs]
        seen[kind] = matches[0] if len(matches) == 1 else f"gave {theirs}"
    found = set(seen.values())
    transparency = found.pop() if len(found) == 1 and found <= set(_RULES) else UNKNOWN
    try:
        _uint8_call(hf_processor, [np.full((side, side, 4), 255, dtype=np.uint8)])
        channels: tuple[int, ...] = (1, 3, 4)
    except Exception:  # noqa: BLE001 - refused: it does not look for 4 channels
        channels = (1, 3)
    unscaled_uint8, lone = _probe_limits(hf_processor, config)
    seen["uint8 when unscaled"] = str(unscaled_uint8)
    seen["lone max_pixels"] = lone
    detail = ", ".join(f"{kind}: {result}" for kind, result in seen.items())
    return RgbRules(transparency, channels, f"{type(hf_processor).__name__} probed: {detail}",
                    unscaled_uint8, lone)


def _probe_limits(hf_processor: Any, config: QwenImageConfig) -> tuple[bool | None, str]:
    """(uint8 output when unscaled, what a lone per-call max_pixels does): one opaque image
    twice the factor on each side, with max_pixels = factor**2 alone; the patch count tells
    honoured from ignored (UNKNOWN where it is neither, or where both give the same count)."""
    side = config.factor
    image = Image.new("RGB", (2 * side, 2 * side), _COLOR)
    try:
        out = hf_processor(images=[image], return_tensors="pt", max_pixels=side * side,
                           do_rescale=False, do_normalize=False)
        values = out["pixel_values"]
    except Exception:  # noqa: BLE001 - a failure is a behaviour we do not follow
        return None, UNKNOWN
    unscaled_uint8 = str(getattr(values, "dtype", "")).endswith("uint8")
    rows = int(values.shape[0])
    honoured = _patches(2 * side, config.factor, config.min_pixels, side * side, config)
    ignored = _patches(2 * side, config.factor, config.min_pixels, config.max_pixels, config)
    if honoured == ignored:
        return unscaled_uint8, UNKNOWN
    if rows == honoured:
        return unscaled_uint8, HONOURED
    return unscaled_uint8, IGNORED if rows == ignored else UNKNOWN


def _patches(edge: int, factor: int, min_pixels: int, max_pixels: int,
             config: QwenImageConfig) -> int:
    height, width = smart_resize(edge, edge, factor, min_pixels, max_pixels)
    return (height // config.patch_size) * (width // config.patch_size)


_INSTALLED_LOCK = threading.Lock()


@functools.cache
def _installed(mode: str) -> RgbRules:
    try:
        import transformers
    except ImportError:
        return PILLOW_DEFAULT
    names = {"torchvision": ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"),
             "pil": ("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor")}[mode]
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                instance = getattr(transformers, name)()
        except Exception:  # noqa: BLE001 - absent, or its backend (torchvision) is missing
            continue
        if mode_of(instance) == mode:
            try:
                return probe(instance)
            except QwenProcessorError:  # settings we do not mirror: nothing to follow
                return PILLOW_DEFAULT
    return PILLOW_DEFAULT


def installed(mode: str) -> RgbRules:
    """The rules of the installed transformers' processor class for ``mode`` (probed once per
    process); Pillow's convert when transformers or that class is missing."""
    with _INSTALLED_LOCK:
        return _installed(mode)


RulesSource = Callable[[], RgbRules]
