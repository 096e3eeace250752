"""The table every kernel takes: ``lut[c, v]`` is what byte ``v`` of channel ``c`` becomes.

Each model builds its normalize table from its own float arithmetic; the identity table here
is the one they share, for uint8 output (engines that normalize on the device).
"""

from __future__ import annotations

import numpy as np


def identity_lut() -> np.ndarray:
    """uint8 table that passes bytes through: the kernel then emits uint8 patches."""
    return np.ascontiguousarray(np.tile(np.arange(256, dtype=np.uint8), (3, 1)))
