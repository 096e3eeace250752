"""Probes that prove our video processor equal to a transformers one before it replaces it.

Why: the twin follows the installed transformers by construction everywhere but the pixels,
and the pixels (sizing rule, resize, LUT, temporal pairing and pad) are checked here on small
clips, in this process, against the very processor object the engine would use: odd and even
frame counts, THWC and TCHW, float32 and uint8 output, the per-frame cap on and off, and the
mismatched-frames refusal. Cheap (a few ms of transformers work), run once per processor.
"""

from __future__ import annotations

import typing
import warnings
from typing import Any

import numpy as np
import torch

_CASES: tuple[tuple[int, int, int, dict[str, Any]], ...] = (
    (3, 50, 70, {}),  # odd frame count: the pad
    (4, 64, 96, {"do_rescale": False, "do_normalize": False}),  # uint8 output
    (2, 41, 33, {"cap_pixels_per_frame": True}),
    (5, 37, 120, {"cap_pixels_per_frame": False}),
)


def _clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(frames, height, width, 3), dtype=np.uint8)


def _known_kwargs(hf_processor: Any) -> set[str] | None:
    """The call kwargs the installed transformers declares for this processor
    (``valid_kwargs``, a TypedDict), or None when it declares none."""
    declared = getattr(hf_processor, "valid_kwargs", None)
    try:
        return set(typing.get_type_hints(declared))
    except Exception:  # noqa: BLE001 - no declaration: every probe case runs
        return None


def check_video_compatible(hf_processor: Any, fast: Any = None) -> str | None:
    """None when ``fast`` (default: ``fast_video_processor(hf_processor)``) gives
    ``torch.equal`` output to ``hf_processor`` on the probe clips, else the first difference
    as a sentence."""
    from .video_processor import fast_video_processor

    try:
        fast = fast if fast is not None else fast_video_processor(hf_processor)
    except ValueError as exc:
        return f"settings not reproduced: {exc}"
    known = _known_kwargs(hf_processor)
    for seed, (frames, height, width, kwargs) in enumerate(_CASES):
        if known is not None and not known.issuperset(kwargs):
            # a kwarg this transformers does not have (cap_pixels_per_frame before 5.19):
            # no caller can pass it, and ours refuses it in transformers' own validation
            continue
        clip = _clip(seed, frames, height, width)
        for layout, video in (("THWC", clip),
                              ("TCHW", torch.from_numpy(clip).permute(0, 3, 1, 2))):
            call = dict(kwargs, do_sample_frames=False, return_tensors="pt")
            what = f"{frames}x{width}x{height} {layout} {kwargs or 'defaults'}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = hf_processor(video, **call)
            except Exception as exc:  # noqa: BLE001 - a probe transformers refuses says nothing
                return f"probe {what}: transformers raised {type(exc).__name__}: {exc}"
            try:
                got = fast(video, **call)
            except Exception as exc:  # noqa: BLE001 - any failure of ours is a difference
                return f"probe {what}: ours raised {type(exc).__name__}: {exc}"
            for key in ("video_grid_thw", "pixel_values_videos"):
                a, b = want[key], got[key]
                if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                    return f"probe {what}: {key} differs ({a.dtype} {tuple(a.shape)} vs " \
                           f"{b.dtype} {tuple(b.shape)})"
    return None
