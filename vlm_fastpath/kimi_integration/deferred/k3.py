"""Kimi K3's pixel recipe: the release's torch arithmetic, op for op, on any torch device.

This is what SGLang's K3 image path computes (0.5.17's ``KimiK3GPUProcessorWrapper._gpu_call``;
0.5.23's ``_gpu_preprocess_images`` with ``kimi_k3_image_processing.to_chw_uint8`` and
``fill_transparent_bg``, also used by the model's deferred owner), *not* Pillow's resampler:

1. stage (:func:`.transport.to_chw_uint8` with ``recipe="k3"``; :func:`k3_stage`): uint8
   ``[C, H, W]``, ``RGBA`` kept for images with an alpha band or a transparency key (not
   premultiplied), gray replicated to 3 channels;
2. resize all channels at once in float32 (:func:`k3_resize`):
   ``F.interpolate(bicubic, align_corners=False, antialias=True)``, then ``round_()`` and
   ``clamp_(0, 255)``; an image already at the target size is only cast to float32;
3. fill transparent pixels on the resized float image
   (:func:`.background.fill_transparent_bg_float`; 3 channels pass through);
4. pad right/bottom with ``0.0`` (``F.pad``), normalize in float32 as
   ``torch.addcmul(bias, x, scale)`` with ``scale = float32(1 / (255 * std))`` and
   ``bias = float32(-mean / std)`` (the factors computed in Python floats, like the release's
   ``normalization_tensors``), so padding becomes ``bias``;
5. patchify to ``[N, 3, p, p]`` in row-major patch order.

Images with the same target and source shape are resized in one batched call, as the release
batches them; every op treats batch items and channels independently.

Exactness: on the CPU the result equals the release's functions run on the CPU
(``torch.equal``; tests/kimi_integration/test_deferred_k3.py, against SGLang 0.5.23's own
functions and a spec-written oracle). Note that torch's CPU ``addcmul`` rounds once (a fused
multiply-add) on AVX2/AVX-512 builds, so ``x * scale + bias`` written as two float32 ops does
*not* reproduce it. Steps 3 and 5 are exact on every device. The float resize (step 2) can
differ between CPU and CUDA kernels by a rounding step, as it does for the release itself, and
on CUDA the release normalizes in a Triton kernel (``value * scale + bias``, contracted to an
FMA unless fp fusion is off) where this module keeps the ``addcmul`` of the release's CPU
fallback; neither CUDA point has been measured here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..navit_resize import ResizePlan
from .background import BackgroundConfig, fill_transparent_bg_float


def k3_normalization(
    image_mean: Sequence[float], image_std: Sequence[float], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The release's ``normalization_tensors``: float32 ``scale`` and ``bias``, ``[1, 3, 1, 1]``."""
    scale = torch.tensor([1.0 / (255.0 * std) for std in image_std], dtype=torch.float32,
                         device=device).view(1, 3, 1, 1)
    bias = torch.tensor([-mean / std for mean, std in zip(image_mean, image_std, strict=True)],
                        dtype=torch.float32, device=device).view(1, 3, 1, 1)
    return scale, bias


def k3_stage(chw: torch.Tensor) -> torch.Tensor:
    """A raw uint8 ``[C, H, W]`` frame as the release resizes it: gray repeated to 3 channels."""
    if chw.dtype != torch.uint8 or chw.dim() != 3 or chw.shape[0] not in (1, 3, 4):
        raise ValueError(f"expected uint8 [C, H, W] with C in 1/3/4, got {chw.dtype} "
                         f"{tuple(chw.shape)}")
    return chw.repeat(3, 1, 1) if chw.shape[0] == 1 else chw


def k3_resize(x: torch.Tensor, out_h: int, out_w: int) -> torch.Tensor:
    """uint8 ``[B, C, H, W]`` -> float32 ``[B, C, out_h, out_w]`` (integer-valued, 0..255)."""
    x = x.float()
    if x.shape[-2:] == (out_h, out_w):
        return x
    out = F.interpolate(x, size=(out_h, out_w), mode="bicubic", align_corners=False,
                        antialias=True)
    return out.round_().clamp_(0.0, 255.0)


def k3_normalize_and_patchify(
    x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, patch_size: int,
    padded_height: int, padded_width: int,
) -> torch.Tensor:
    """float32 ``[B, 3, h, w]`` -> float32 ``[B, grid_h * grid_w, 3, p, p]`` (pad, normalize)."""
    pad_height = padded_height - x.shape[-2]
    pad_width = padded_width - x.shape[-1]
    if pad_height > 0 or pad_width > 0:
        x = F.pad(x, (0, pad_width, 0, pad_height), value=0.0)
    x = torch.addcmul(bias, x, scale)
    b, c, h, w = x.shape
    p = patch_size
    x = x.view(b, c, h // p, p, w // p, p)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c, p, p)


def k3_frames(
    batch: torch.Tensor, plan: ResizePlan, bg: BackgroundConfig, scale: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """Steps 2-5 for staged uint8 ``[B, C, H, W]`` frames of one source shape and one plan."""
    x = k3_resize(batch, plan.new_height, plan.new_width)
    x = fill_transparent_bg_float(x, bg)
    return k3_normalize_and_patchify(
        x, scale, bias, plan.patch_size, plan.padded_height, plan.padded_width
    )
