"""Per-channel 256-entry lookup tables that replace rescale + normalize.

A uint8 pixel can take only 256 values, so the normalized float is a function of (channel,
value). The table is built by running the checkpoint's exact float operations (float64 divide,
float32 cast, float64 subtract/multiply stored to float32) on those 256 values, so a lookup is
bit-identical to the arithmetic for any mean/std, not only the 0.5/0.5 of Kimi.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def build_normalize_lut(mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Float32 table of shape (3, 256): ``lut[c, v]`` is the normalized value of byte ``v``."""
    values = np.arange(256, dtype=np.uint8)
    planes = np.empty((3, 256), dtype=np.float32)
    mean64 = np.asarray(mean, dtype=np.float64)
    inv_std64 = 1.0 / np.asarray(std, dtype=np.float64)
    for channel in range(3):
        # Spelled out in float64 so numpy's scalar promotion rules (which changed in 2.0)
        # cannot turn the f64 subtract/multiply into an f32 one.
        x = (values.astype(np.float64) / 255.0).astype(np.float32)
        x = (x.astype(np.float64) - mean64[channel]).astype(np.float32)
        x = (x.astype(np.float64) * inv_std64[channel]).astype(np.float32)
        planes[channel] = x
    return planes
