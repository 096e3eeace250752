"""Every frame of a Qwen-VL video call into its temporal slots, on every core.

Why: transformers' video processor resizes a clip (torch, uint8 antialiased bicubic), then
rescales, normalizes, pads an odd clip with its last frame, stacks frame pairs and permutes
them into patches: five passes over tensors as large as the output. Here one kernel per frame
band does the resize (torch's own integer arithmetic and taps: ``torch_taps``), the LUT
(``normalize_lut``) and the write of each patch into the frame's temporal slot of the output
(``_numba_video``): each output byte is written once, and the two frames of a pair meet only
in the output.

How: every video of a call shares one plan per frame size (taps from ``torch_taps``, cached);
each frame is cut into bands of patch rows so that there are at least a few jobs per worker,
and the jobs run on the process's resize pool (``kimi_integration.resize_pool``), each a
serial ``nogil`` numba call writing disjoint bytes. No numba threading layer is used, so
nothing here takes the parallel-launch lock or cares about fork (the pool is per process).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlm_fastpath.kimi_integration.resize_pool import get_pool, pool_size

from ..numba_kernels import LazyKernels
from .torch_taps import axis_taps, padded_taps

_KERNELS = LazyKernels("vlm_fastpath.qwen_integration._numba_video", "Qwen video kernel")

JOBS_PER_WORKER = 3  # bands enough that a slow frame does not leave the other cores idle


def kernels_available() -> bool:
    """True when the compiled video kernel can run (numba on and importable)."""
    return _KERNELS.available()


@dataclass(frozen=True)
class VideoPlan:
    """One video's target: every frame resized to ``height`` x ``width``; ``grid_t`` groups
    of ``temporal_patch_size`` frames (an odd clip padded with its last frame)."""

    frames: int
    height: int
    width: int
    patch_size: int
    merge_size: int
    temporal_patch_size: int

    @property
    def grid_t(self) -> int:
        return -(-self.frames // self.temporal_patch_size)

    @property
    def grid_h(self) -> int:
        return self.height // self.patch_size

    @property
    def grid_w(self) -> int:
        return self.width // self.patch_size

    @property
    def rows_per_group(self) -> int:
        return self.grid_h * self.grid_w

    @property
    def num_patches(self) -> int:
        return self.grid_t * self.rows_per_group

    @property
    def row_length(self) -> int:
        return 3 * self.temporal_patch_size * self.patch_size**2


def frame_slots(index: int, frames: int, t: int) -> tuple[int, int, int]:
    """``(group, first slot, slot count)`` of frame ``index`` of a clip of ``frames``: its
    own slot, and every later slot of its group when it is the clip's last frame (the pad)."""
    group, slot = divmod(index, t)
    count = t - slot if index == frames - 1 else 1
    return group, slot, count


def fill_videos(
    videos: Sequence[np.ndarray],
    channels_last: Sequence[bool],
    plans: Sequence[VideoPlan],
    outs: Sequence[np.ndarray],
    lut: np.ndarray,
) -> None:
    """Write every frame of ``videos`` (uint8 ``[T, H, W, C]`` when ``channels_last``, else
    ``[T, C, H, W]``; 3 channels, or 4 of which the 4th is never read) into ``outs`` (one
    ``[plan.num_patches, plan.row_length]`` C-contiguous array per video, of ``lut``'s
    dtype)."""
    resize = _KERNELS.kernel("resize_patchify_slot_band")
    copy = _KERNELS.kernel("patchify_slot_band")
    if resize is None or copy is None:
        raise RuntimeError("the video kernel needs numba")
    total_frames = sum(len(video) for video in videos)
    workers = pool_size()
    jobs: list[tuple[Any, tuple[Any, ...], int, int]] = []
    for video, last, plan, out in zip(videos, channels_last, plans, outs, strict=True):
        if out.shape != (plan.num_patches, plan.row_length) or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous {(plan.num_patches, plan.row_length)}, "
                             f"got {out.shape}")
        p, m, t = plan.patch_size, plan.merge_size, plan.temporal_patch_size
        bands = max(1, min(plan.grid_h, -(-JOBS_PER_WORKER * workers // total_frames)))
        edges = [round(k * plan.grid_h / bands) for k in range(bands + 1)]
        rows = plan.rows_per_group
        height, width = video.shape[1:3] if last else video.shape[2:4]
        unchanged = (height, width) == (plan.height, plan.width)
        if not unchanged:
            xmin, xw, xprecision = padded_taps(width, plan.width)
            ytaps = axis_taps(height, plan.height)
        for index in range(len(video)):
            group, slot0, nslots = frame_slots(index, plan.frames, t)
            dest = out[group * rows:(group + 1) * rows]
            tail = (lut, dest, plan.grid_w, p, m, t, slot0, nslots)
            frame = video[index]
            if unchanged and not last:
                kernel: Any = copy
                head: tuple[Any, ...] = (np.ascontiguousarray(frame[:3]), *tail)
            else:
                if not last:  # planes to resize: the horizontal pass reads interleaved rows
                    frame = frame.transpose(1, 2, 0)
                cs = frame.shape[2]
                src = np.ascontiguousarray(frame).reshape(height, width * cs)
                if unchanged:  # torch's taps of an unchanged axis are the identity
                    xmin, xw, xprecision = padded_taps(width, width)
                    ytaps = axis_taps(height, height)
                kernel = resize
                head = (src, cs, xmin, xw, xprecision, ytaps.starts, ytaps.sizes,
                        ytaps.weights, ytaps.precision, *tail)
            for g0, g1 in zip(edges[:-1], edges[1:], strict=True):
                if g1 > g0:
                    jobs.append((kernel, head, g0, g1))
    if workers <= 1 or len(jobs) == 1:
        for kernel, head, g0, g1 in jobs:
            kernel(*head, g0, g1)
        return
    pool = get_pool()
    futures: list[Future[None]] = [pool.submit(kernel, *head, g0, g1)
                                   for kernel, head, g0, g1 in jobs]
    try:
        for future in futures:
            future.result()
    finally:
        for future in futures:
            future.cancel()
