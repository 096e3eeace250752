"""Shared helpers for the FusedKimiProcessor tests.

Every parity helper compares the package against ``reference_kimi`` (the spec-derived oracle),
never against the package itself.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from fixtures.reference_kimi import ref_preprocess

REPO_ROOT = Path(__file__).resolve().parents[2]


# -- images -----------------------------------------------------------------------------------
def rand_array(seed: int, width: int, height: int, channels: int = 3) -> np.ndarray:
    """Fresh random uint8 HWC pixels (never constant, so resize/pad bugs show)."""
    rng = np.random.default_rng(seed)
    shape = (height, width) if channels == 0 else (height, width, channels)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def rand_image(seed: int, width: int, height: int, mode: str = "RGB") -> Image.Image:
    """A random PIL image of ``mode`` built from real pixels (RGB, RGBA, L, LA)."""
    channels = {"RGB": 3, "RGBA": 4, "L": 0, "LA": 2}[mode]
    image = Image.fromarray(rand_array(seed, width, height, channels))
    assert image.size == (width, height) and image.mode == mode
    return image


def palette_image(seed: int, w: int, h: int, transparency=None) -> Image.Image:
    """A "P" image with a random palette (and, optionally, a transparent index)."""
    rng = np.random.default_rng(seed)
    image = Image.frombytes("P", (w, h), rand_array(seed, w, h, 0).tobytes())
    image.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
    if transparency is not None:
        image.info["transparency"] = transparency
    return image


def encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def img(image) -> dict:
    return {"type": "image", "image": image}


def video(frames) -> dict:
    return {"type": "video_chunk", "video_chunk": list(frames)}


# -- parity ------------------------------------------------------------------------------------
def assert_parity(proc, medias, cfg, *, oracle_medias=None, uint8: bool = False):
    """Run ``proc`` on ``medias`` and the oracle on ``oracle_medias`` (PIL twins); torch.equal."""
    oracle_medias = medias if oracle_medias is None else oracle_medias
    exp_pv, exp_grid, exp_tokens = ref_preprocess(oracle_medias, cfg, uint8=uint8)
    if uint8:
        out = proc.preprocess(medias, do_rescale=False, do_normalize=False)
    else:
        out = proc.preprocess(medias)
    pv, grid = out["pixel_values"], out["grid_thws"]
    assert grid.dtype == torch.int64
    assert torch.equal(grid, exp_grid), (grid.tolist(), exp_grid.tolist())
    assert pv.dtype == (torch.uint8 if uint8 else torch.float32)
    assert pv.shape == exp_pv.shape, (tuple(pv.shape), tuple(exp_pv.shape))
    if not torch.equal(pv, exp_pv):
        diff = (pv.double() - exp_pv.double()).abs()
        bad = int((diff > 0).sum())
        raise AssertionError(
            f"pixel_values differ in {bad} of {pv.numel()} values, max abs {diff.max().item()}"
        )
    tokens = [proc.media_tokens_calculator(m) for m in medias]
    assert tokens == exp_tokens
    return out
