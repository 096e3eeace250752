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

Pass order depends on the Pillow version: up to 12.x the horizontal pass always runs first;
Pillow 13.0 runs the vertical pass first when the height shrinks and
``(H - oh) > 2 * (W - ow)`` (:func:`vertical_first`; "the height shrinks" was measured here:
a growing height never goes first). The order changes the 8-bit intermediate, hence some
output bytes.

:func:`torch_antialias_resize` is the plain ``torch.nn.functional.interpolate`` alternative
(bicubic, ``antialias=True``, round + clamp): float arithmetic without the 8-bit intermediate,
so within a level of Pillow but not equal to it. Its values are those of the K3 recipe's
resize (:func:`.k3.k3_resize`, which keeps them in float32 for the fill that follows).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import PIL
import torch
import torch.nn.functional as F

PRECISION_BITS = 32 - 8 - 2
_SUPPORT = 2.0  # bicubic
_A = -0.5


def pillow_version() -> tuple[int, ...]:
    parts = []
    for piece in PIL.__version__.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def vertical_first(in_w: int, in_h: int, out_w: int, out_h: int,
                   version: tuple[int, ...] | None = None) -> bool:
    """True when the installed Pillow runs the vertical pass before the horizontal one."""
    version = pillow_version() if version is None else version
    if version < (13, 0):
        return False
    # Measured against Pillow 13.0.0 on 395 random size pairs (shrinking and growing): the
    # vertical pass goes first only when the height shrinks, by more than twice the width.
    return in_h > out_h and (in_h - out_h) > 2 * (in_w - out_w)


def _bicubic(x: np.ndarray) -> np.ndarray:
    # Same expressions, same evaluation order as Pillow's bicubic_filter (float64).
    x = np.abs(x)
    near = ((_A + 2.0) * x - (_A + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * _A
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


@functools.lru_cache(maxsize=256)
def pillow_coefficients(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pillow's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` for the full box.

    Returns ``(xmin, count, weights)``: int64 ``[out]``, int64 ``[out]`` and the int32
    fixed-point weights ``[out, ksize]`` (zero beyond ``count``).
    """
    if in_size <= 0 or out_size <= 0:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")
    scale = float(np.float32(in_size) - np.float32(0.0)) / out_size
    filterscale = max(scale, 1.0)
    support = _SUPPORT * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = 0.0 + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    ss = 1.0 / filterscale
    xmin = np.trunc(center - support + 0.5).astype(np.int64)
    xmin = np.maximum(xmin, 0)
    xmax = np.trunc(center + support + 0.5).astype(np.int64)
    xmax = np.minimum(xmax, in_size)
    count = xmax - xmin
    taps = np.arange(ksize, dtype=np.int64)
    valid = taps[None, :] < count[:, None]
    arg = ((taps[None, :] + xmin[:, None]).astype(np.float64) - center[:, None] + 0.5) * ss
    weights = np.where(valid, _bicubic(arg), 0.0)
    total = np.zeros(out_size, dtype=np.float64)
    for k in range(ksize):  # sequential sum, in Pillow's order
        total = total + weights[:, k]
    safe = np.where(total != 0.0, total, 1.0)
    weights = np.where(total[:, None] != 0.0, weights / safe[:, None], weights)
    scaled = weights * (1 << PRECISION_BITS)
    fixed = np.where(weights < 0, np.trunc(-0.5 + scaled), np.trunc(0.5 + scaled))
    return xmin, count, fixed.astype(np.int32)


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
    weight_t = torch.from_numpy(np.ascontiguousarray(fixed)).to(device)
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
