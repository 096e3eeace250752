"""The frame size transformers' Qwen-VL video processors resize a clip to, as pure functions.

Two rules, each as the installed transformers computes it (5.19-5.25 read):
- Qwen2/2.5-VL (``Qwen2VLVideoProcessor.resize``): the image rule (``smart_resize``) with
  ``size``'s shortest/longest edge as min/max pixels; with ``cap_pixels_per_frame`` the max is
  also held to an even share of ``max_video_tokens * factor**2 * 0.9`` per temporal pair,
  floored at 1.05 x min pixels.
- Qwen3-VL (``Qwen3VLVideoProcessor.resize``): its own ``smart_resize`` over the whole clip
  (``num_frames * H * W`` against the limits; frames under one ``factor`` are first scaled
  up by truncation; fewer frames than ``temporal_patch_size`` are refused); with
  ``cap_pixels_per_frame`` the max becomes ``num_frames`` times a per-frame share.

Before, Qwen3-VL's ``smart_resize`` refused frames under one ``factor`` and rounded the
temporal length up (5.6-5.14 read; 5.15 has today's rule without the cap):
``installed_rule`` picks, by probing the installed transformers' own ``smart_resize``, the
rule of ours that computes the same, or none.

Which ``max_video_tokens`` the cap reads (the per-call value from 5.25, the processor's own
before) is the caller's to say: ``video_processor`` probes the installed ``resize``.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from typing import Any

from .errors import QwenVideoInputError
from .smart_resize import MAX_ASPECT_RATIO, smart_resize

QWEN2 = "qwen2"
QWEN3 = "qwen3"


def qwen2_frame_size(
    num_frames: int, height: int, width: int, *, factor: int, temporal_factor: int,
    min_pixels: int, max_pixels: int, capped: bool, max_video_tokens: int,
) -> tuple[int, int]:
    """(height, width) every frame of a Qwen2/2.5-VL clip is resized to."""
    if capped:
        if num_frames <= 0:
            raise QwenVideoInputError("a video needs at least one frame")
        budget = int(max_video_tokens * factor * factor * 0.9)
        max_pixels = max(min(max_pixels, budget * temporal_factor // num_frames),
                         int(min_pixels * 1.05))
    return smart_resize(height, width, factor, min_pixels, max_pixels)


def qwen3_frame_size(
    num_frames: int, height: int, width: int, *, factor: int, temporal_factor: int,
    min_pixels: int, max_pixels: int, capped: bool, max_video_tokens: int,
) -> tuple[int, int]:
    """(height, width) every frame of a Qwen3-VL clip is resized to."""
    if num_frames < temporal_factor:
        raise QwenVideoInputError(
            f"t:{num_frames} must be larger than temporal_factor:{temporal_factor} "
            f"(Qwen3-VL needs at least {temporal_factor} frames per video)"
        )
    if capped:
        per_frame = max(min(max_video_tokens * factor * factor, max_pixels // num_frames),
                        int(min_pixels * 1.05))
        max_pixels = per_frame * num_frames
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if min(height, width) <= 0:
        raise QwenVideoInputError(f"frames of {width}x{height} cannot be resized")
    _check_ratio(height, width)
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    h_bar, w_bar = _clip_grid(num_frames, t_bar, height, width, factor, min_pixels, max_pixels)
    if h_bar <= 0 or w_bar <= 0:
        raise QwenVideoInputError(f"frames of {width}x{height} resize to an empty grid")
    return h_bar, w_bar


def _check_ratio(height: int, width: int) -> None:
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise QwenVideoInputError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {ratio}"
        )


def _clip_grid(num_frames: int, t_bar: int, height: int, width: int, factor: int,
               min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen3-VL's frame grid for a clip whose temporal length rounds to ``t_bar``: the
    nearest multiples of ``factor``, scaled down (or up) until ``t_bar`` frames of it fit the
    limits, the scale taken over the real ``num_frames``."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen3_legacy_frame_size(
    num_frames: int, height: int, width: int, *, factor: int, temporal_factor: int,
    min_pixels: int, max_pixels: int, capped: bool, max_video_tokens: int,
) -> tuple[int, int]:
    """(height, width) of a Qwen3-VL clip under transformers 5.6-5.14 (read; 5.15 has
    today's rule): frames under one ``factor`` are refused rather than scaled up, and the
    temporal length rounds up (``ceil``). ``capped``/``max_video_tokens`` do not exist there."""
    if height < factor or width < factor:
        raise QwenVideoInputError(
            f"height:{height} or width:{width} must be larger than factor:{factor}"
        )
    _check_ratio(height, width)
    t_bar = math.ceil(num_frames / temporal_factor) * temporal_factor
    return _clip_grid(num_frames, t_bar, height, width, factor, min_pixels, max_pixels)


# every rule we have per model, newest first; ``installed_rule`` picks the one transformers has
CANDIDATES = {QWEN2: (qwen2_frame_size,), QWEN3: (qwen3_frame_size, qwen3_legacy_frame_size)}
MODULES = {QWEN2: "transformers.models.qwen2_vl.video_processing_qwen2_vl",
           QWEN3: "transformers.models.qwen3_vl.video_processing_qwen3_vl"}
# (frames, height, width, factor, min_pixels, max_pixels): one frame, a frame under one
# factor, an odd clip where the cap binds (the temporal rounding), the minimum binding, an
# aspect ratio over the limit, a real clip
_PROBES = (
    (1, 64, 64, 32, 4096, 25165824),
    (4, 20, 300, 32, 4096, 25165824),
    (5, 100, 150, 32, 4096, 3 * 96 * 128),
    (5, 64, 64, 32, 1024, 20000),  # binds with the temporal length rounded up, not rounded
    (6, 97, 131, 32, 4 * 128 * 128, 16 * 256 * 256),
    (3, 50, 70, 28, 3136, 12845056),
    (2, 10, 3000, 28, 3136, 12845056),
    (7, 1080, 1920, 28, 3136, 602112),
)


def _outcome(call: Callable[[], tuple[int, int]]) -> tuple[int, int] | str:
    try:
        height, width = call()
    except ValueError:
        return "ValueError"
    return int(height), int(width)


def _theirs(model: str, theirs: Callable[..., Any], probe: tuple[int, ...]) -> Any:
    frames, height, width, factor, low, high = probe
    if model == QWEN3:
        return _outcome(lambda: theirs(num_frames=frames, height=height, width=width,
                                       temporal_factor=2, factor=factor, min_pixels=low,
                                       max_pixels=high))
    return _outcome(lambda: theirs(height, width, factor=factor, min_pixels=low,
                                   max_pixels=high))


def _ours(rule: Callable[..., tuple[int, int]], probe: tuple[int, ...]) -> Any:
    frames, height, width, factor, low, high = probe
    return _outcome(lambda: rule(frames, height, width, factor=factor, temporal_factor=2,
                                 min_pixels=low, max_pixels=high, capped=False,
                                 max_video_tokens=0))


@functools.cache
def installed_rule(model: str) -> Callable[..., tuple[int, int]] | None:
    """Our rule that sizes frames as the installed transformers' ``smart_resize`` of
    ``model``'s video processor does on the probes (results and refusals alike), or None:
    a rule we have not read, and transformers' own path sizes the clip."""
    try:
        theirs = importlib.import_module(MODULES[model]).smart_resize
    except Exception:  # noqa: BLE001 - moved or renamed: not a rule we know
        return None
    want = [_theirs(model, theirs, probe) for probe in _PROBES]
    for rule in CANDIDATES[model]:
        if [_ours(rule, probe) for probe in _PROBES] == want:
            return rule
    return None
