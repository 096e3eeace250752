"""Shared helpers for the Qwen-VL processor tests.

Every parity check compares the package against the transformers processors themselves
(``Qwen2VLImageProcessor``: torchvision-backed; ``Qwen2VLImageProcessorPil``: PIL-backed),
never against a port of our own.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.bench.checkpoints import QWEN3_VL_CFG, QWEN25_VL_CFG

REPO_ROOT = Path(__file__).resolve().parents[2]

# preprocessor_config.json of the public checkpoints (values as published).
QWEN25_VL_CONFIG: dict[str, Any] = QWEN25_VL_CFG
QWEN3_VL_CONFIG: dict[str, Any] = QWEN3_VL_CFG
CONFIGS = {"qwen2.5-vl": QWEN25_VL_CONFIG, "qwen3-vl": QWEN3_VL_CONFIG}
MODES = ("torchvision", "pil")


def hf_classes() -> dict[str, Any]:
    """The two transformers processors, or skip when transformers/torchvision are missing."""
    pytest.importorskip("torchvision")
    transformers = pytest.importorskip("transformers")
    return {
        "torchvision": transformers.Qwen2VLImageProcessor,
        "pil": transformers.Qwen2VLImageProcessorPil,
    }


def hf_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """Constructor kwargs of a transformers processor for a preprocessor_config dict."""
    skip = {"image_processor_type", "processor_class"}
    return {k: v for k, v in config.items() if k not in skip}


def write_checkpoint(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    return folder


# -- images -----------------------------------------------------------------------------------
def rand_array(seed: int, width: int, height: int, channels: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (height, width) if channels == 0 else (height, width, channels)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def rand_image(seed: int, width: int, height: int) -> Image.Image:
    return Image.fromarray(rand_array(seed, width, height))


def smooth_image(seed: int, width: int, height: int) -> Image.Image:
    """Low-frequency pixels (like photos), so a resize bug is not hidden by noise."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 16), max(2, width // 16), 3))
    image = Image.fromarray(small.astype(np.uint8)).resize((width, height), Image.BILINEAR)
    return image


def jpeg_roundtrip(image: Image.Image, quality: int = 90) -> Image.Image:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    decoded = Image.open(io.BytesIO(buf.getvalue()))
    decoded.load()
    return decoded


# -- parity ------------------------------------------------------------------------------------
def as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))


def assert_same(expected: Any, got: Any) -> None:
    """torch.equal on pixel_values and image_grid_thw, with a useful message."""
    for key in ("image_grid_thw", "pixel_values"):
        want, have = as_tensor(expected[key]), as_tensor(got[key])
        assert want.dtype == have.dtype, (key, want.dtype, have.dtype)
        assert want.shape == have.shape, (key, tuple(want.shape), tuple(have.shape))
        if not torch.equal(want, have):
            diff = (want.double() - have.double()).abs()
            raise AssertionError(
                f"{key} differs in {int((diff > 0).sum())} of {want.numel()} values, "
                f"max abs {diff.max().item()}"
            )


def run_both(hf: Any, fast: Any, images: Any, **kwargs: Any) -> tuple[Any, Any]:
    expected = hf(images=images, return_tensors="pt", **kwargs)
    got = fast(images=images, return_tensors="pt", **kwargs)
    assert_same(expected, got)
    return expected, got
