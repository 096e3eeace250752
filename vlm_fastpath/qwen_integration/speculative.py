"""A Qwen image's pixel_values, made strip by strip while the engine's loader decodes it.

Why: from bytes, a 4032x3024 JPEG photo costs about 30 ms of decoding on one core, then
the processor's patch writes (146 MB of float32) on every core; done one after the other,
decoding leaves the other cores idle (issue #30). The offered processor
(``imaging.decode.speculation``) starts here on the rows already decoded.

How: the output is cut into strips of whole merge rows; Qwen writes a merge row's patches
contiguously, so a strip is an image of its own for the fused kernel (its source rows a view
of the decoded buffer, its vertical taps the strip's slice of the image's, rebased). A pool
thread waits, without the GIL, for each strip's last source row (``row_progress``) and runs
the strip on one thread while the decoder holds the other core, on every thread once the
decode is over. The result is the processor's own: the same kernel, plan and table as a
call would use, and the call takes it only for an equal config and plan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..imaging.decode.speculation import Prepared, run_strips
from ..imaging.output_pool import empty_output
from ..imaging.resize_pool import get_pool
from ..imaging.row_progress import RowProgress
from ..imaging.torch_taps import AxisTaps, axis_taps
from .patchify_kernel import resize_patchify_frames, vertical_kernels_available


def start(processor: Any, mode: str, pixels: np.ndarray, progress: RowProgress
          ) -> Prepared | None:
    """The processor's call on ``pixels`` (RGB, being decoded) with the settings of its latest
    call, started on the pool; None where the call would not take the fused kernel (another
    mode, torch's resize off, one side resized and not the other)."""
    if mode != "RGB" or pixels.ndim != 3 or pixels.shape[2] != 3:
        return None
    if not (processor.fuse_vertical_pass and vertical_kernels_available()):
        return None
    config = processor.last_config  # the engine asks each image for the same settings
    height, width = pixels.shape[:2]
    plan = processor._plan(config, height, width)
    if (plan.height == height) != (plan.width == width):
        return None
    lut = processor._lut(config)
    p, t = config.patch_size, config.temporal_patch_size
    out = empty_output((plan.num_patches, 3 * t * p * p), lut.dtype)
    future = get_pool().submit(_run, pixels, progress, plan, lut, out, config)
    return Prepared(processor, key(config, plan), future)


def key(config: Any, plan: Any) -> tuple[Any, Any]:
    """What a call must match to take the result: its resolved settings and plan."""
    return (config, plan)


def _run(pixels: np.ndarray, progress: RowProgress, plan: Any, lut: np.ndarray,
         out: np.ndarray, config: Any) -> np.ndarray:
    p, m, t = config.patch_size, config.merge_size, config.temporal_patch_size
    height = pixels.shape[0]
    taps = axis_taps(height, plan.height) if plan.height != height else None

    def reads(g0: int, g1: int) -> int:
        return _source_rows(taps, g0, g1, p)[1]

    def run(g0: int, g1: int, workers: int) -> None:
        lo, hi, strip_taps = _source_rows(taps, g0, g1, p)
        frame = (pixels[lo:hi], strip_taps, out[g0 * plan.grid_w : g1 * plan.grid_w],
                 g1 - g0, plan.grid_w)
        if not resize_patchify_frames([frame], lut, p, m, t, pool=get_pool(), workers=workers):
            raise RuntimeError("the fused kernel's job loop is missing")

    # strips of whole merge rows: a merge row's patches are contiguous in Qwen's output
    run_strips(plan.grid_h, m, progress, reads, run)
    return out


def _source_rows(taps: AxisTaps | None, g0: int, g1: int, p: int
                 ) -> tuple[int, int, AxisTaps | None]:
    """Source rows ``lo .. hi`` of patch rows ``g0 .. g1``, and their vertical taps rebased
    to ``lo`` (None: the image keeps its height)."""
    if taps is None:
        return g0 * p, g1 * p, None
    a, b = g0 * p, g1 * p
    starts, sizes = taps.starts[a:b], taps.sizes[a:b]
    lo = int(starts.min())
    hi = int((starts + sizes).max())
    sub = AxisTaps(starts=starts - lo, sizes=sizes, weights=taps.weights[a:b],
                   precision=taps.precision, pairs=taps.pairs[a:b])
    return lo, hi, sub
