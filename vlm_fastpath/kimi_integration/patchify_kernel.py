"""Pad + normalize-by-table + patchify in one pass over a resized uint8 frame.

Why a dedicated kernel: upstream's fused kernel walks the output element by element with five
integer div/mods each and scatters writes over the three channel planes; on 2 cores it is slower
than plain numpy. Here the loop is patch-major: each (parallel) iteration fills one output patch
``[3, p, p]`` contiguously, reading a p x p window of the frame that stays in cache.

Launches follow the one rule of :mod:`vlm_fastpath.imaging.numba_launch` (one process-wide
lock, the ``workqueue`` layer unless the user chose, serial in a forked child of a process that
launched a fork-unsafe layer).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..imaging.numba_launch import kernels, launch

logger = logging.getLogger(__name__)


def patchify_numpy(
    frame: np.ndarray, lut: np.ndarray, out: np.ndarray, grid_h: int, grid_w: int, p: int
) -> None:
    """Vectorized numpy version with identical output (used when numba is not installed)."""
    height, width = frame.shape[:2]
    canvas = np.zeros((grid_h * p, grid_w * p, 3), dtype=np.uint8)
    canvas[:height, :width] = frame
    mapped = np.empty((3, grid_h * p, grid_w * p), dtype=lut.dtype)
    for c in range(3):
        np.take(lut[c], canvas[:, :, c], out=mapped[c])
    patches = mapped.reshape(3, grid_h, p, grid_w, p).transpose(1, 3, 0, 2, 4)
    out.reshape(grid_h, grid_w, 3, p, p)[...] = patches


_KERNELS = kernels("vlm_fastpath.kimi_integration._numba_patchify", "patchify path")


def numba_available() -> bool:
    """True when the compiled kernel will be used."""
    return _KERNELS.available()


def backend_info() -> dict[str, Any]:
    """What the kernel runs on, for ``doctor`` and the benchmark."""
    return _KERNELS.info()


def patchify_frame(
    frame: np.ndarray,
    lut: np.ndarray,
    out: np.ndarray,
    grid_h: int,
    grid_w: int,
    p: int,
    *,
    parallel: bool = True,
) -> None:
    """Write ``grid_h * grid_w`` patches of ``frame`` (uint8 HWC, unpadded) into ``out``.

    ``out`` has shape ``[grid_h * grid_w, 3, p, p]`` and the dtype of ``lut`` (3 x 256).
    Pixels beyond the frame (right/bottom padding) get ``lut[c, 0]``. ``parallel=False`` runs
    on the calling thread without the lock: safe to call from many threads at once.
    """
    if out.shape[0] != grid_h * grid_w:
        raise ValueError(f"out holds {out.shape[0]} patches, expected {grid_h * grid_w}")
    _KERNELS.load()
    if _KERNELS.parallel is None:
        patchify_numpy(frame, lut, out, grid_h, grid_w, p)
        return
    if not parallel:
        assert _KERNELS.serial is not None
        _KERNELS.serial(frame, lut, out, grid_w, p)
        return
    launch(_KERNELS, _KERNELS.parallel, _KERNELS.serial, (frame, lut, out, grid_w, p))
