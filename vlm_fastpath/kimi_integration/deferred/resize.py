"""Bicubic downscaling on any torch device: a bit-exact port of Pillow's uint8 resampler.

This is the K2.5 recipe's resize (Pillow-exact, :func:`pillow_resize`). The K3 recipe does
not use Pillow's arithmetic: it follows the release's float ``interpolate`` (:mod:`.k3`).

Pillow (shared/UPSTREAM.md section 5) resizes uint8 images separably: per output column (row)
it evaluates Keys' cubic (a = -0.5) on a support widened by the scale factor, normalizes the
weights in float64, turns them into 22-bit fixed point (rounding half away from zero), sums
``pixel * weight`` in int32 starting at ``1 << 21``, shifts right by 22 and clamps to 0..255.
The two passes meet in an 8-bit intermediate. Here the weights are computed on the host with
the same float64 operations in the same order (so they are the same integers), and the passes
run on the device as integer gathers, which are exact on every device: the result equals
``PIL.Image.resize(..., BICUBIC)`` byte for byte.

The weights and the pass order come from :mod:`..pillow_coeffs` (shared with the fused CPU
kernel): the order depends on the Pillow version (:func:`vertical_first`: 13.0 runs the
vertical pass first when the height shrinks by more than twice the width, 12.2-12.3 when the
image is taller than 100x its width) and changes the 8-bit intermediate, hence some bytes.

:func:`torch_antialias_resize` is the plain ``torch.nn.functional.interpolate`` alternative
(bicubic, ``antialias=True``, round + clamp): float arithmetic without the 8-bit intermediate,
so within a level of Pillow but not equal to it. Its values are those of the K3 recipe's
resize (:func:`.k3.k3_resize`, which keeps them in float32 for the fill that follows).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from ...imaging.pillow_coeffs import (
    PRECISION_BITS,
    pillow_coefficients,
    pillow_version,
    vertical_first,
)

__all__ = [
    "PRECISION_BITS",
    "pillow_coefficients",
    "pillow_resize",
    "pillow_version",
    "torch_antialias_resize",
    "vertical_first",
]


@functools.lru_cache(maxsize=64)
def _device_coefficients(
    in_size: int, out_size: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    xmin, count, fixed = pillow_coefficients(in_size, out_size)
    ksize = fixed.shape[1]
    taps = np.arange(ksize, dtype=np.int64)
    index = np.minimum(xmin[:, None] + taps[None, :], in_size - 1)  # weight 0 beyond count
    first = int(xmin.min())
    last = int((xmin + count).max())
    index_t = torch.from_numpy(np.ascontiguousarray(index - first)).to(device)
    weight_t = torch.from_numpy(np.array(fixed)).to(device)  # a writable copy of the cache
    return index_t, weight_t, first, last


def _pass(x: torch.Tensor, in_size: int, out_size: int, dim: int, *, cropped: bool = False
          ) -> torch.Tensor:
    """One 8-bit resampling pass of uint8 ``x`` along ``dim`` (-1: width, -2: height).

    ``cropped``: ``x`` already holds only the source lines ``[first, last)`` this pass reads.
    """
    index, weight, first, last = _device_coefficients(in_size, out_size, str(x.device))
    if not cropped:
        x = x.narrow(dim, first, last - first)
    if x.shape[dim] != last - first:
        raise AssertionError(f"pass expects {last - first} source lines, got {x.shape[dim]}")
    shape = list(x.shape)
    shape[dim] = out_size
    acc = torch.full(shape, 1 << (PRECISION_BITS - 1), dtype=torch.int32, device=x.device)
    for k in range(weight.shape[1]):
        w = weight[:, k] if dim == -1 else weight[:, k, None]
        acc += x.index_select(dim, index[:, k]).to(torch.int32) * w
    acc >>= PRECISION_BITS
    return acc.clamp_(0, 255).to(torch.uint8)


def pillow_resize(x: torch.Tensor, out_w: int, out_h: int,
                  version: tuple[int, ...] | None = None) -> torch.Tensor:
    """Pillow-exact bicubic resize of uint8 ``[..., H, W]`` (any device, any batch).

    Equals ``Image.resize((out_w, out_h), BICUBIC)`` of each image for the Pillow
    ``version`` (default: the installed one). Upscaling uses the same arithmetic.
    """
    if x.dtype != torch.uint8:
        raise TypeError(f"pillow_resize needs uint8 pixels, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"pillow_resize needs [..., H, W], got shape {tuple(x.shape)}")
    in_h, in_w = int(x.shape[-2]), int(x.shape[-1])
    need_h = out_w != in_w
    need_v = out_h != in_h
    if not need_h and not need_v:
        return x.clone()
    if not need_v:
        return _pass(x, in_w, out_w, -1)
    if not need_h:
        return _pass(x, in_h, out_h, -2)
    if vertical_first(in_w, in_h, out_w, out_h, version):
        _, _, first, last = _device_coefficients(in_w, out_w, str(x.device))
        x = _pass(x.narrow(-1, first, last - first), in_h, out_h, -2)
        return _pass(x, in_w, out_w, -1, cropped=True)
    # Horizontal first over only the source rows the vertical pass reads, like Pillow.
    _, _, first, last = _device_coefficients(in_h, out_h, str(x.device))
    x = _pass(x.narrow(-2, first, last - first), in_w, out_w, -1)
    return _pass(x, in_h, out_h, -2, cropped=True)


def torch_antialias_resize(x: torch.Tensor, out_w: int, out_h: int) -> torch.Tensor:
    """``interpolate(bicubic, antialias=True)`` in float32, then round + clamp to uint8."""
    if x.dtype != torch.uint8:
        raise TypeError(f"torch_antialias_resize needs uint8 pixels, got {x.dtype}")
    if (int(x.shape[-2]), int(x.shape[-1])) == (out_h, out_w):
        return x.clone()
    lead = x.shape[:-3]
    flat = x.reshape(-1, *x.shape[-3:]).float()
    out = F.interpolate(flat, size=(out_h, out_w), mode="bicubic", antialias=True,
                        align_corners=False)
    out = out.round_().clamp_(0, 255).to(torch.uint8)
    return out.reshape(*lead, *out.shape[-3:])
