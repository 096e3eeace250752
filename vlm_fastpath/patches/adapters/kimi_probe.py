"""The behaviour clause of the Kimi processor patches: ours equals the engine's own, probed.

Engine-neutral (vLLM's fused-class patch and SGLang's CPU-path patch both use it). Before our
processor is handed out in place of the engine's (vLLM's ``KimiK25FusedVisionProcessor``, or
the checkpoint's media processor on SGLang's CPU path), both run on small probe images: every
PIL mode (transparency included: RGBA, LA, PA, P with a transparent palette entry), odd sizes
and extreme aspect ratios, float32 and, where the engine takes ``do_rescale``/``do_normalize``
(vLLM 0.32+), uint8. From a class the probes also run under a small patch budget, so the resize
path is exercised on small images too. Where the engine raises, ours must raise as well.

Verdicts are kept per (engine class, configuration): a process probes each once.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any


def default_media_proc_cfg() -> dict[str, Any]:
    """Kimi K2.5's published ``media_proc_cfg`` (every key, as the checkpoint's JSON has it)."""
    from vlm_fastpath.kimi_integration.config import KimiMediaConfig

    return KimiMediaConfig().to_dict()


# Patch budget of the second configuration: every probe image above ~28x28 is resized.
SMALL_PATCH_LIMIT = 4
# (mode, width, height): odd and prime sizes, 1-pixel sides, extreme aspect ratios.
PROBE_IMAGES: tuple[tuple[str, int, int], ...] = (
    ("RGB", 61, 37),
    ("RGB", 1, 1),
    ("RGB", 301, 3),
    ("RGBA", 45, 29),
    ("L", 33, 57),
    ("LA", 27, 41),
    ("P", 39, 23),
    ("P+transparency", 31, 35),
    ("PA", 23, 19),
    ("1", 29, 31),
    ("I", 21, 25),
    ("I;16", 25, 21),
    ("F", 19, 27),
    ("CMYK", 37, 17),
    ("YCbCr", 17, 43),
)

_LOCK = threading.Lock()
_VERDICTS: dict[tuple[int, str], str | None] = {}


def probe_image(mode: str, width: int, height: int, seed: int = 0) -> Any:
    """A deterministic noise image of ``mode`` (``P+transparency``: P with a clear entry)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed + width * 131 + height)
    rgba = rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)
    rgba[..., 3] = np.where(rgba[..., 3] < 64, 0, rgba[..., 3])  # some fully clear pixels
    image = Image.fromarray(rgba, "RGBA")
    if mode == "RGBA":
        return image
    if mode in ("P", "P+transparency", "PA"):
        palette = image.convert("RGB").quantize(colors=16)
        if mode == "P+transparency":
            palette.info["transparency"] = 3
        if mode == "PA":
            pa = Image.merge("PA", (palette, image.getchannel("A")))
            pa.putpalette(palette.getpalette())
            return pa
        return palette
    if mode == "LA":
        return image.convert("LA")
    if mode in ("I", "I;16", "F"):
        values = rng.integers(0, 60000, size=(height, width)).astype(np.float64)
        if mode == "F":
            return Image.fromarray(values.astype(np.float32) / 300.0, "F")
        image_i = Image.fromarray(values.astype(np.int32))  # mode I
        return image_i.convert("I;16") if mode == "I;16" else image_i
    return image.convert("RGB").convert(mode)


class OursForProbe:
    """Our pixels as the adapter computes them, outside containment (a probe is no fault)."""

    def __init__(self, media_proc_cfg: dict[str, Any]) -> None:
        from vlm_fastpath.kimi_integration import FusedKimiProcessor

        self._fused = FusedKimiProcessor(media_proc_cfg)

    def preprocess(
        self, medias: list[Any], do_rescale: bool = True, do_normalize: bool = True
    ) -> Any:
        return self._fused.preprocess(
            medias, return_tensors="pt", do_rescale=do_rescale, do_normalize=do_normalize
        )


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        out = call()
    except Exception as exc:  # noqa: BLE001 - raising is an outcome the other side must share
        return "raised", type(exc).__name__
    return "ok", out


def _same(ours: Any, theirs: Any) -> str | None:
    """None when both BatchFeatures carry equal tensors (dtype, shape, values)."""
    import torch

    keys = ("pixel_values", "grid_thws")
    for key in keys:
        a, b = ours.get(key), theirs.get(key)
        if a is None or b is None:
            return f"{key} missing on {'ours' if a is None else 'the engine'}'s side"
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{key} {a.dtype}{list(a.shape)} vs the engine's {b.dtype}{list(b.shape)}"
        if not torch.equal(a, b):
            diff = (a.double() - b.double()).abs().max().item()
            return f"{key} differs (max abs diff {diff:g})"
    return None


def takes_normalize_flags(processor: Any) -> bool:
    import inspect

    try:
        return "do_normalize" in inspect.signature(processor.preprocess).parameters
    except (TypeError, ValueError):
        return False


def compare_pair(engine: Any, ours: Any, label: str) -> str | None:
    """``behaviour: ...`` naming the first probe where two processors differ, else None."""
    flag_sets: list[dict[str, bool]] = [{}]
    if takes_normalize_flags(engine):
        flag_sets.append({"do_rescale": False, "do_normalize": False})
    for mode, width, height in PROBE_IMAGES:
        image = probe_image(mode, width, height)
        for flags in flag_sets:
            what = f"{mode} {width}x{height} {'uint8' if flags else 'float32'}, {label}"
            # A fresh list each call: processors may rewrite the media dicts they are given.
            theirs = _outcome(functools.partial(
                engine.preprocess, [{"type": "image", "image": image}], **flags))
            mine = _outcome(functools.partial(
                ours.preprocess, [{"type": "image", "image": image}], **flags))
            if theirs[0] != mine[0]:
                side = "ours" if mine[0] == "raised" else "the engine's"
                raised = mine[1] if mine[0] == "raised" else theirs[1]
                return f"behaviour: {what}: only {side} raised ({raised})"
            if theirs[0] == "ok":
                differs = _same(mine[1], theirs[1])
                if differs:
                    return f"behaviour: {what}: {differs}"
    return None


def compare(
    engine_class: Callable[[dict[str, Any]], Any],
    ours_class: Callable[[dict[str, Any]], Any],
    media_proc_cfg: Mapping[str, Any],
) -> str | None:
    """``compare_pair`` under the configuration and under a small patch budget."""
    small = dict(media_proc_cfg, in_patch_limit=SMALL_PATCH_LIMIT)
    for cfg, label in ((dict(media_proc_cfg), "the checkpoint's config"),
                       (small, f"in_patch_limit={SMALL_PATCH_LIMIT}")):
        clause = compare_pair(engine_class(dict(cfg)), ours_class(dict(cfg)), label)
        if clause:
            return clause
    return None


def _cached(key: tuple[int, str], run: Callable[[], str | None]) -> str | None:
    with _LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
    try:
        result = run()
    except Exception as exc:  # noqa: BLE001 - a probe that cannot run is a failed clause
        result = f"behaviour: the probes could not run ({type(exc).__name__}: {exc})"
    with _LOCK:
        _VERDICTS[key] = result
    return result


def _config_key(media_proc_cfg: Mapping[str, Any]) -> str:
    return json.dumps(media_proc_cfg, sort_keys=True, default=repr)


def verdict(
    engine_class: Any, ours_class: Any, media_proc_cfg: Mapping[str, Any]
) -> str | None:
    """``compare`` once per (engine class, configuration) in this process."""
    return _cached(
        (id(engine_class), _config_key(media_proc_cfg)),
        lambda: compare(engine_class, ours_class, media_proc_cfg),
    )


def instance_verdict(engine: Any, media_proc_cfg: Mapping[str, Any]) -> str | None:
    """An engine processor we only hold (not its class) against ours, once per (class, config)."""
    return _cached(
        (id(type(engine)), _config_key(media_proc_cfg)),
        lambda: compare_pair(engine, OursForProbe(dict(media_proc_cfg)), "its config"),
    )
