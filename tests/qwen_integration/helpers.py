"""Shared helpers for the Qwen-VL processor tests.

Every parity check compares the package against the transformers processors themselves
(``Qwen2VLImageProcessor``: torchvision-backed; ``Qwen2VLImageProcessorPil``: PIL-backed),
never against a port of our own.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[2]

# preprocessor_config.json of the public checkpoints (values as published).
QWEN25_VL_CONFIG: dict[str, Any] = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}
QWEN3_VL_CONFIG: dict[str, Any] = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
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


# -- subprocesses ------------------------------------------------------------------------------
def subprocess_env(**overrides: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("NUMBA_THREADING_LAYER", "VLM_FASTPATH_NUMBA"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_script(
    tmp_path: Path, code: str, *, timeout: float = 180, **env: str | None
) -> subprocess.CompletedProcess:
    """Run ``code`` as a script file in a fresh interpreter; assert exit 0."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=str(tmp_path),
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc
