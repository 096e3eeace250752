"""Qwen-VL image patches carried once: the compact layout and its exact expansion.

Why: for an image, transformers tiles the single frame ``temporal_patch_size`` (2) times, so
each row of ``pixel_values`` (``[channel, temporal copy, py, px]`` flattened) holds every pixel
twice: a 12 MP photo is 69.8 MiB of uint8 that an engine stores in its processor caches,
serializes to its engine core and copies to the device, where the vision tower's patch
embedding reads both copies. The compact row is ``[channel, py, px]``: half the bytes.

How: the processor writes the compact layout (its kernels with a temporal size of 1) while
:func:`emitting` is active (the engine patch that sends compact items sets it around the
processor call); :func:`expand` restores the temporal copies on the device right before the
tower's patch embedding, a broadcast whose result equals the full layout element for element
(``torch.equal``), so the tower's input is what it was. Videos keep their layout: their
temporal steps are real frames. Model-neutral: shapes only, no engine.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_WANTED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "vlm_fastpath_qwen_compact", default=False
)


@contextlib.contextmanager
def emitting() -> Iterator[None]:
    """Image processor calls in this context write compact rows (one temporal copy)."""
    token = _WANTED.set(True)
    try:
        yield
    finally:
        _WANTED.reset(token)


def wanted() -> bool:
    """True inside :func:`emitting`."""
    return _WANTED.get()


def geometry(tower: Any) -> tuple[int, int, int]:
    """``(channels, temporal, patch)`` of a Qwen vision tower, read from its own patch
    embedding (``patch_embed``: its temporal and spatial patch sizes, its projection's input
    channels); every engine's Qwen towers keep these names."""
    embed = tower.patch_embed
    return int(embed.proj.in_channels), int(embed.temporal_patch_size), int(embed.patch_size)


def is_compact(pixel_values: Any, channels: int, temporal: int, patch: int) -> bool:
    """A 2-D batch of compact rows (``channels * patch**2`` wide) for a tower whose full rows
    are ``temporal`` times wider; never true where ``temporal`` is 1 (the layouts coincide)."""
    shape = getattr(pixel_values, "shape", ())
    return temporal > 1 and len(shape) == 2 and shape[1] == channels * patch * patch


def expand(pixel_values: Any, channels: int, temporal: int, patch: int) -> Any:
    """Compact rows ``[n, C*P*P]`` as full rows ``[n, C*T*P*P]`` (a new tensor on the same
    device and dtype): each channel's patch repeated ``temporal`` times, as transformers tiles
    an image."""
    rows = pixel_values.shape[0]
    area = patch * patch
    return (
        pixel_values.reshape(rows, channels, 1, area)
        .expand(rows, channels, temporal, area)
        .reshape(rows, channels * temporal * area)
    )


def compact(pixel_values: Any, channels: int, temporal: int, patch: int) -> Any | None:
    """Full image rows ``[n, C*T*P*P]`` as compact rows (a contiguous copy of the first
    temporal copy), or None where the copies differ (then they are not one image's tiling and
    only the full form is exact)."""
    rows = pixel_values.shape[0]
    grouped = pixel_values.reshape(rows, channels, temporal, patch * patch)
    first = grouped[:, :, 0]
    for step in range(1, temporal):
        if not bool((grouped[:, :, step] == first).all()):
            return None
    return first.reshape(rows, channels * patch * patch).contiguous()
