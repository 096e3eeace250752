"""Per-channel 256-entry tables that replace rescale + normalize, one per HF arithmetic.

A uint8 pixel takes only 256 values, so each output float is a function of (channel, byte).
The table is exact only if it is built by running the replaced processor's own float
operations, in its order and precision, on those 256 bytes. The two transformers processors
do different arithmetic (checked against them by the tests):

torchvision (``TorchvisionBackend.rescale_and_normalize``), float32 torch ops:
  both on:        mean' = tensor(mean) * (1/rescale_factor), std' likewise (float32, fused);
                  x = float32(byte); x -= mean'; x /= std'
  rescale only:   x = uint8 tensor * rescale_factor (float32 result)
  normalize only: x = float32(byte); x -= mean; x /= std
  both off:       the bytes themselves (uint8 output)
PIL (``PilBackend.rescale`` then ``normalize``), numpy:
  rescale:        x = float32(float64(byte) * rescale_factor)
  normalize:      x = (float32(x) - float32(mean)) / float32(std), in float32
  both off:       float32(byte) (the PIL processor's patchify casts to float32)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .config import PIL, TORCHVISION
from .errors import QwenConfigError


def _torchvision_lut(
    do_rescale: bool,
    rescale_factor: float,
    do_normalize: bool,
    mean: Sequence[float],
    std: Sequence[float],
) -> np.ndarray:
    # Laid out as a (1, 3, 1, 256) image so every op broadcasts exactly as on a real batch.
    image = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, 3, 1, 256)
    image = image.contiguous()
    if do_normalize:
        if do_rescale:
            mean_t = torch.tensor(tuple(mean)) * (1.0 / rescale_factor)
            std_t = torch.tensor(tuple(std)) * (1.0 / rescale_factor)
        else:
            mean_t = torch.as_tensor(tuple(mean), dtype=torch.float32)
            std_t = torch.as_tensor(tuple(std), dtype=torch.float32)
        x = image.to(torch.float32)
        x.sub_(mean_t.view(-1, 1, 1)).div_(std_t.view(-1, 1, 1))
    elif do_rescale:
        x = image * rescale_factor
    else:
        x = image
    return np.ascontiguousarray(x.reshape(3, 256).numpy())


def _pil_lut(
    do_rescale: bool,
    rescale_factor: float,
    do_normalize: bool,
    mean: Sequence[float],
    std: Sequence[float],
) -> np.ndarray:
    # Laid out channels-first (3, 1, 256), as the PIL processor holds an image.
    x: np.ndarray = np.broadcast_to(np.arange(256, dtype=np.uint8), (3, 1, 256)).copy()
    if do_rescale:
        x = (x.astype(np.float64) * rescale_factor).astype(np.float32)
    if do_normalize:
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
        mean_a = np.array(tuple(mean), dtype=x.dtype)
        std_a = np.array(tuple(std), dtype=x.dtype)
        x = ((x.T - mean_a) / std_a).T
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(3, 256))


def build_lut(
    mode: str,
    *,
    do_rescale: bool,
    rescale_factor: float,
    do_normalize: bool,
    image_mean: Sequence[float],
    image_std: Sequence[float],
) -> np.ndarray:
    """(3, 256) table: ``lut[c, v]`` is the output value of byte ``v`` in channel ``c``.

    dtype float32, or uint8 for the torchvision processor with rescale and normalize off.
    """
    if do_normalize and any(float(s) == 0.0 for s in image_std):
        raise QwenConfigError(f"image_std contains a zero: {tuple(image_std)}")
    if mode == TORCHVISION:
        return _torchvision_lut(do_rescale, rescale_factor, do_normalize, image_mean, image_std)
    if mode == PIL:
        return _pil_lut(do_rescale, rescale_factor, do_normalize, image_mean, image_std)
    raise QwenConfigError(f"unknown mode {mode!r}")
