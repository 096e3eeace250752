"""Pad + normalize-by-table + patchify in one pass over a resized uint8 frame.

Why a dedicated kernel: upstream's fused kernel walks the output element by element with five
integer div/mods each and scatters writes over the three channel planes; on 2 cores it is slower
than plain numpy. Here the loop is patch-major: each (parallel) iteration fills one output patch
``[3, p, p]`` contiguously, reading a p x p window of the frame that stays in cache.

Thread/fork safety: numba's ``workqueue`` layer (the one vLLM forces) aborts on concurrent entry
from two threads, and GNU OpenMP aborts in forked children of a process that used it. So every
launch holds one process-wide lock (re-created in forked children), the ``workqueue`` layer is
selected unless the user chose a layer, and a forked child of a process that launched a
fork-unsafe layer runs a serial build of the same kernel.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..numba_kernels import LazyKernels
from .resize_pool import pool_size
from .threading_layer import ensure_loadable_threading_layer

logger = logging.getLogger(__name__)

_FORK_UNSAFE_LAYERS = frozenset({"omp"})


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


_KERNELS = LazyKernels("vlm_fastpath.kimi_integration._numba_patchify", "patchify path")


os.register_at_fork(after_in_child=_KERNELS.reset_after_fork)


def numba_available() -> bool:
    """True when the compiled kernel will be used."""
    return _KERNELS.available()


def backend_info() -> dict[str, Any]:
    """What the kernel runs on, for ``doctor`` and the benchmark."""
    return _KERNELS.info()


def _choose_layer() -> None:
    import numba

    if "NUMBA_THREADING_LAYER" in os.environ:
        return  # the user (or the engine) chose; respect it
    if numba.config.THREADING_LAYER in ("default", "safe", "forksafe", "threadsafe"):
        numba.config.THREADING_LAYER = "workqueue"


def parallel_threads() -> int:
    """numba threads for the next parallel launch (call under the launch lock, on the
    launching thread): ``VLM_FASTPATH_RESIZE_THREADS`` / the usable cores, as for the resize
    pools, so one variable bounds every thread we run; 1 means run the serial kernel. Above 1
    it picks the threading layer first (numba starts its threads when the count is set) and
    sets numba's count for this thread."""
    import numba

    threads = min(pool_size(), numba.config.NUMBA_NUM_THREADS)
    if threads > 1:
        _choose_layer()
        ensure_loadable_threading_layer()
        numba.set_num_threads(threads)
    return threads


def _pick_kernel() -> Callable[..., None]:
    assert _KERNELS.parallel is not None and _KERNELS.serial is not None
    if _KERNELS.launch_pid is not None and (
            _KERNELS.launch_pid != os.getpid() and _KERNELS.launch_layer in _FORK_UNSAFE_LAYERS):
        return _KERNELS.serial  # a forked child of a process that launched a fork-unsafe layer
    if parallel_threads() <= 1:
        return _KERNELS.serial
    return _KERNELS.parallel


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
    with _KERNELS.lock:
        kernel = _pick_kernel()
        kernel(frame, lut, out, grid_w, p)
        if kernel is _KERNELS.parallel and _KERNELS.launch_pid is None:
            import numba

            _KERNELS.launch_pid = os.getpid()
            _KERNELS.launch_layer = numba.threading_layer()
