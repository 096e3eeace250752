"""Inputs shared by the backend tests (run in-process and in fresh subprocesses)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

from .helpers import CONFIGS, rand_image, smooth_image


def backend_batches() -> dict[str, list[Any]]:
    return {
        "single": [smooth_image(1, 1100, 900)],
        "two": [rand_image(2, 300, 500), rand_image(3, 61, 29)],
        "many": [rand_image(i, 40 + 37 * i, 90 + 11 * i) for i in range(5)],
    }


def run_backend_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Outputs of every (mode, config, dtype, batch) case, keyed by name."""
    results: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for mode in ("torchvision", "pil"):
        for config_name, config in CONFIGS.items():
            proc = FastQwen2VLImageProcessor(config, mode=mode)
            for batch_name, images in backend_batches().items():
                for uint8 in (False, True):
                    kwargs = {"do_rescale": False, "do_normalize": False} if uint8 else {}
                    out = proc(images=images, return_tensors="pt", **kwargs)
                    key = f"{mode}-{config_name}-{batch_name}-{'u8' if uint8 else 'f32'}"
                    # numpy copies: a torch clone runs on torch's OpenMP pool, which hangs
                    # in a forked child (torch's matter, not the package's)
                    results[key] = (_copy(out["pixel_values"]), _copy(out["image_grid_thw"]))
    return results


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(tensor.numpy().copy())


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    # numpy, not torch.equal: torch's own OpenMP pool can hang in a forked child
    x, y = a.numpy(), b.numpy()
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
