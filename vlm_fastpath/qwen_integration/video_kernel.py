"""Every frame of a Qwen-VL video call into its temporal slots, on every core.

Why: transformers' video processor resizes a clip (torch, uint8 antialiased bicubic), then
rescales, normalizes, pads an odd clip with its last frame, stacks frame pairs and permutes
them into patches: five passes over tensors as large as the output. Here one kernel per frame
band does the resize (torch's own integer arithmetic and taps: ``torch_taps``), the LUT
(``normalize_lut``) and the write of each patch into the frame's temporal slot of the output
(``_numba_video``): each output byte is written once, and the two frames of a pair meet only
in the output.

How: every video of a call shares one plan per frame size (taps from ``torch_taps``, cached);
each temporal group (the frames that share output rows) is cut into bands of patch rows so
that there are at least a few jobs per worker, each job writing whole rows no other job
writes. A clip read in place (C-contiguous ``[T, H, W, C]``, what the engines pass) runs its
jobs in one GIL-free job loop per thread (``imaging.job_loop``: the caller's thread and the
resize pool's take jobs from one counter), so a thread running Python beside the call (an API
server's event loop) costs a takeback of the GIL per thread, not per job: 32x1280x720 uint8
beside one, same process, 66.9 -> 37.2 ms (19.4 alone); 16x3840x2160 95.4 -> 73.9 ms (38.5
alone). Any other layout is copied a group at a time, in that group's job on the pool. No
numba threading layer is used, so nothing here takes the parallel-launch lock or cares about
fork (the pool is per process).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..imaging.job_loop import run_jobs
from ..imaging.numba_launch import kernels
from ..imaging.resize_pool import get_pool, pool_size
from ..imaging.torch_taps import axis_taps, horizontal_taps

_KERNELS = kernels("vlm_fastpath.qwen_integration._numba_video", "Qwen video kernel")

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


def group_frames(group: int, frames: int, t: int) -> tuple[int, int]:
    """``(first, count)``: the frames of temporal group ``group`` of a clip of ``frames``
    (``count < t`` only for an odd clip's last group, which the kernel pads with its last
    frame, as transformers does)."""
    first = group * t
    return first, min(t, frames - first)


def _rows(video: np.ndarray, channels_last: bool, first: int, count: int) -> np.ndarray:
    """Frames ``first .. first+count`` of ``video`` as the kernel reads them: uint8
    ``[count, H, W*C]`` interleaved rows (a view of a C-contiguous THWC video, else a copy)."""
    frames = video[first:first + count]
    if not channels_last:
        frames = frames.transpose(0, 2, 3, 1)
    count, height, width, channels = frames.shape
    return np.ascontiguousarray(frames).reshape(count, height, width * channels)


def _run_group(kernel: Any, video: np.ndarray, channels_last: bool, first: int, count: int,
               taps: tuple[Any, ...], tail: tuple[Any, ...], bands: Sequence[tuple[int, int]]
               ) -> None:
    frames = _rows(video, channels_last, first, count)
    for g0, g1 in bands:
        kernel(frames, video.shape[3 if channels_last else 1], *taps, *tail, g0, g1)


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
    dtype). One job per temporal group and band of patch rows, run in job loops; a video
    that is not a C-contiguous THWC array is copied one group at a time, in its group's job
    on the pool."""
    kernel = _KERNELS.kernel("resize_patchify_group_band")
    loop = _KERNELS.kernel("group_band_jobs")
    if kernel is None or loop is None:
        raise RuntimeError("the video kernel needs numba")
    total_groups = sum(plan.grid_t for plan in plans)
    workers = pool_size()
    jobs: list[tuple[Any, ...]] = []
    loops: list[tuple[int, tuple[Any, ...]]] = []
    for video, last, plan, out in zip(videos, channels_last, plans, outs, strict=True):
        if out.shape != (plan.num_patches, plan.row_length) or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous {(plan.num_patches, plan.row_length)}, "
                             f"got {out.shape}")
        p, m, t = plan.patch_size, plan.merge_size, plan.temporal_patch_size
        if plan.height % (p * m) or plan.width % (p * m) or plan.frames < 1:
            # the kernel's merge-order row index assumes whole merge blocks: anything else
            # would write past ``out``
            raise ValueError(f"a video plan needs frames and a {plan.height}x{plan.width} frame "
                             f"in whole {p * m}-pixel merge blocks, got {plan}")
        height, width = video.shape[1:3] if last else video.shape[2:4]
        ytaps = axis_taps(height, plan.height)
        cs = video.shape[3 if last else 1]
        taps = (*horizontal_taps(width, plan.width, cs), ytaps.starts, ytaps.sizes,
                ytaps.weights, ytaps.pairs, ytaps.precision)
        count = max(1, min(plan.grid_h, -(-JOBS_PER_WORKER * workers // total_groups)))
        edges = [round(k * plan.grid_h / count) for k in range(count + 1)]
        bands = [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]
        rows = plan.rows_per_group
        if last and video.flags.c_contiguous:
            # read in place: every (group, band) a job of one GIL-free loop per thread
            table = np.array([(group, *group_frames(group, plan.frames, t), g0, g1)
                              for group in range(plan.grid_t) for g0, g1 in bands], np.int64)
            frames = video.reshape(video.shape[0], height, width * cs)
            loops.append((len(table), (table, frames, cs, *taps, lut, out, rows, plan.grid_w,
                                       p, m, t)))
            continue
        for group in range(plan.grid_t):  # one copy of the group's frames, then its bands
            first, frames_in_group = group_frames(group, plan.frames, t)
            tail = (lut, out[group * rows:(group + 1) * rows], out.nbytes, plan.grid_w, p, m,
                    t)
            jobs.append((kernel, video, last, first, frames_in_group, taps, tail, bands))
    for count, args in loops:
        run_jobs(loop, count, args, workers)
    if not jobs:
        return
    if workers <= 1 or len(jobs) == 1:
        for job in jobs:
            _run_group(*job)
        return
    pool = get_pool()
    futures: list[Future[None]] = [pool.submit(_run_group, *job) for job in jobs]
    try:
        for future in futures:
            future.result()
    finally:
        for future in futures:
            future.cancel()
