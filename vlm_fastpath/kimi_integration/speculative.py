"""A Kimi image's pixel_values, made strip by strip while the engine's loader decodes it.

Why and how as for Qwen (``qwen_integration.speculative``; ``imaging.decode.speculation``):
the offered processor starts on a large image while its rows decode. Kimi writes patches row
by row, so patch rows ``g0 .. g1`` are one contiguous slice of the output; the resampler's
band kernel runs them on the decoded array in place once the source rows their vertical taps
read are decoded (``row_progress``), on one thread while the decoder holds the other core and
on every thread once it is done. Same kernel, taps and table as a call, so the same bytes;
the call takes the result only for equal settings and plan. An image kept at its size (only
padded, normalized and patchified) runs the patch kernel strip by strip the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..imaging.decode.speculation import Prepared, run_strips
from ..imaging.output_pool import empty_output
from ..imaging.resample import (
    array_band_args,
    kernel_enabled,
    run_patch_rows,
    source_rows_read,
)
from ..imaging.resize_pool import get_pool, pool_size
from ..imaging.row_progress import RowProgress
from .navit_resize import plan_image
from .patchify_kernel import patchify_frame


def start(processor: Any, mode: str, pixels: np.ndarray, progress: RowProgress
          ) -> Prepared | None:
    """The processor's call on ``pixels`` (RGB, being decoded) with the output kind of its
    latest call, started on the pool; None for another mode, or an image to resize with the
    band kernel off (the call would take another resampler)."""
    if mode != "RGB" or pixels.ndim != 3 or pixels.shape[2] != 3:
        return None
    height, width = pixels.shape[:2]
    plan = plan_image(processor.config, width, height)
    kept = (plan.new_width, plan.new_height) == (width, height)
    if not kept and not kernel_enabled():
        return None
    flags = processor.last_flags
    lut = processor._lut(*flags)
    p = plan.patch_size
    out = empty_output((plan.num_patches, 3, p, p), lut.dtype)
    future = get_pool().submit(_run_kept if kept else _run, pixels, progress, plan, lut, out)
    return Prepared(processor, key(flags, plan), future)


def key(flags: tuple[bool, bool], plan: Any) -> tuple[Any, Any]:
    """What a call must match to take the result: ``(do_rescale, do_normalize)`` and plan."""
    return (flags, plan)


def _run(pixels: np.ndarray, progress: RowProgress, plan: Any, lut: np.ndarray,
         out: np.ndarray) -> np.ndarray:
    p = plan.patch_size
    args = array_band_args(pixels, plan.new_width, plan.new_height)

    def run(g0: int, g1: int, workers: int) -> None:
        run_patch_rows(args, lut, out, plan.grid_w, p, g0, g1, workers)

    run_strips(plan.grid_h, 1, progress, lambda g0, g1: source_rows_read(args, p, g0, g1), run)
    return out


def _run_kept(pixels: np.ndarray, progress: RowProgress, plan: Any, lut: np.ndarray,
              out: np.ndarray) -> np.ndarray:
    """An image kept at its size (padded, normalized, patchified): each strip once its own
    rows are decoded."""
    p, height = plan.patch_size, pixels.shape[0]

    def run(g0: int, g1: int, workers: int) -> None:
        # one thread while the decoder holds a core; every pool thread once it is done
        patch_kept_rows(pixels, lut, out, plan, g0, g1, parallel=workers == pool_size())

    run_strips(plan.grid_h, 1, progress, lambda g0, g1: min(g1 * p, height), run)
    return out


def patch_kept_rows(pixels: np.ndarray, lut: np.ndarray, out: np.ndarray, plan: Any, g0: int,
                    g1: int, parallel: bool) -> None:
    """Patch rows ``g0 .. g1`` of an image kept at its size: its source rows ``g0 * p`` up to
    ``g1 * p`` (fewer in the last, which the kernel pads) are a strip of its own."""
    p = plan.patch_size
    patchify_frame(pixels[g0 * p : min(g1 * p, pixels.shape[0])], lut,
                   out[g0 * plan.grid_w : g1 * plan.grid_w], g1 - g0, plan.grid_w, p,
                   parallel=parallel)
