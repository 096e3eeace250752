"""LUT-normalize + temporal tiling + merge-order patchify of one resized uint8 frame.

Output row ``i`` is one patch, in the order the Qwen-VL vision tower merges them
(block row, block column, row in block, column in block); each row holds
``[channel, temporal copy, py, px]``, the image frame repeated ``temporal_patch_size`` times.
Each (parallel) iteration writes one whole row, so writes are contiguous.

torch's uint8 antialiased bicubic resize runs here too, in numba with torch's integer
arithmetic and taps (``torch_taps``), so the resized frame is never written:
``resize_patchify_frame`` runs both passes and the patch writes in bands of patch rows (the
common case: both sides change; ``resize_patchify_frames`` for every image of a call in one
job loop); ``vertical_patchify_frame`` the vertical pass and the writes;
``horizontal_pass`` the horizontal pass alone. Measured at 2048² in one benchmark run, with
torch's own horizontal pass before our vertical one: float32 72 -> 57 ms, uint8 61 -> 47 ms per
image on 2 cores; torch's horizontal pass itself, 2048² -> 2044² on 2 cores in one run: 23.1 ms,
ours 6.0; both passes fused against ours one after the other: see ``resize_patchify_frame``.

vLLM 0.32+ asks for uint8 (rescale and normalize off: the device normalizes). Its table is the
identity, so the patch writes are byte copies, a 16-byte vector per patch line
(``_numba_bytes``), and both resize passes multiply torch's int16 taps with 16-bit multiplies,
windows of 3-8 taps summed in registers (``_numba_int16_taps``). Measured on one thread, one
2048² image, minimum of 25 runs in one process on a loaded 2-core machine: the patch writes
from planes 9.3 -> 5.2 ms (uint8), the whole fused resize and patch kernel 25.8 -> 18.5 ms in
uint8 and 28.1 -> 25.1 ms in float32 (which gains the resize part only).

Concurrency and fork safety follow the one launch rule of every model's kernels
(:mod:`vlm_fastpath.imaging.numba_launch`): numba's ``workqueue`` layer aborts when two threads
enter *any* parallel kernel at once, so the Qwen and Kimi kernels share one launch lock, and a
forked child of a process that launched a fork-unsafe layer (GNU OpenMP) runs the serial build.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

from ..imaging.job_loop import even_edges, run_jobs
from ..imaging.numba_launch import kernels, launch
from ..imaging.output_pool import empty_output
from ..imaging.torch_taps import AxisTaps, horizontal_taps

logger = logging.getLogger(__name__)


def patchify_numpy(
    frame: np.ndarray, lut: np.ndarray, out: np.ndarray, grid_h: int, grid_w: int, p: int,
    m: int, t: int,
) -> None:
    """Vectorized numpy version with identical output (used when numba is off or missing)."""
    mapped = np.empty((3, grid_h * p, grid_w * p), dtype=lut.dtype)
    for c in range(3):
        np.take(lut[c], frame[:, :, c], out=mapped[c])
    blocks = mapped.reshape(3, grid_h // m, m, p, grid_w // m, m, p)
    blocks = blocks.transpose(1, 4, 2, 5, 0, 3, 6)  # (bh, bw, mh, mw, c, py, px)
    view = out.reshape(grid_h // m, grid_w // m, m, m, 3, t, p, p)
    view[...] = blocks[:, :, :, :, :, None, :, :]


_KERNELS = kernels("vlm_fastpath.qwen_integration._numba_patchify", "Qwen patchify")


def numba_available() -> bool:
    """True when the compiled kernel will be used."""
    return _KERNELS.available()


def backend_info() -> dict[str, Any]:
    """What the kernel runs on, for ``doctor`` and the benchmark."""
    return _KERNELS.info()


def kernel_source(frame: np.ndarray) -> tuple[np.ndarray, bool, int]:
    """``(src, planar, cs)`` for the kernel without copying when the layout allows:
    interleaved HWC bytes of ``cs`` channels (RGB, or Pillow's RGBX: the 4th byte is never
    read) as ``[1, H, W*cs]``, or channel planes (torch's resize returns CHW memory behind its
    HWC view; the first 3 of 4 for RGBX) as ``[3, H, W]``; any other strides are copied to HWC
    once."""
    height, width, cs = frame.shape
    if frame.flags.c_contiguous:
        return frame.reshape(1, height, width * cs), False, cs
    planes = frame.transpose(2, 0, 1)
    if planes.flags.c_contiguous:
        return planes[:3], True, cs
    return np.ascontiguousarray(frame).reshape(1, height, width * cs), False, cs


def _check_grid_and_out(out: np.ndarray, grid_h: int, grid_w: int, p: int, m: int,
                        t: int) -> None:
    """The checks both kernels' callers share: a grid of whole merge blocks, and ``out`` of
    one C-contiguous row per patch."""
    if grid_h % m or grid_w % m:
        raise ValueError(f"grid {grid_h}x{grid_w} is not a multiple of merge_size {m}")
    expected = (grid_h * grid_w, 3 * t * p * p)
    if out.shape != expected or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous of shape {expected}, got {out.shape}")


def patchify_frame(
    frame: np.ndarray,
    lut: np.ndarray,
    out: np.ndarray,
    grid_h: int,
    grid_w: int,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    *,
    parallel: bool = True,
) -> None:
    """Write the ``grid_h * grid_w`` patches of ``frame`` (uint8 HWC) into ``out``.

    ``out`` is ``[grid_h * grid_w, 3 * temporal_patch_size * patch_size**2]`` of ``lut``'s
    dtype; ``frame`` (3 channels, or 4 for Pillow's RGBX bytes) is exactly
    ``grid_h * patch_size`` by ``grid_w * patch_size``.
    ``parallel=False`` runs on the calling thread without the lock: safe from many threads.
    """
    p, m, t = patch_size, merge_size, temporal_patch_size
    if (frame.ndim != 3 or frame.shape[0] != grid_h * p or frame.shape[1] != grid_w * p
            or frame.shape[2] not in (3, 4)):
        raise ValueError(f"frame of shape {frame.shape} does not match grid {grid_h}x{grid_w}")
    _check_grid_and_out(out, grid_h, grid_w, p, m, t)
    _KERNELS.load()
    if _KERNELS.parallel is None:
        patchify_numpy(frame, lut, out, grid_h, grid_w, p, m, t)
        return
    src, planar, cs = kernel_source(frame)
    if not parallel:
        assert _KERNELS.serial is not None
        _KERNELS.serial(src, planar, cs, lut, out, grid_w, p, m, t)
        return
    _launch(_KERNELS.parallel, _KERNELS.serial, (src, planar, cs, lut, out, grid_w, p, m, t))


def _launch(parallel: Any, serial: Any, args: tuple[Any, ...]) -> None:
    """A parallel kernel under the one launch rule (:func:`..imaging.numba_launch.launch`)."""
    launch(_KERNELS, parallel, serial, args)


def vertical_kernels_available() -> bool:
    """True when :func:`vertical_patchify_frame` can run (numba on)."""
    return _KERNELS.kernel("vertical_patchify_serial") is not None


MAX_BANDS = 8  # one compiled signature: the band tuple always has this length


def vertical_patchify_frame(
    bands: Sequence[np.ndarray],
    taps: AxisTaps,
    lut: np.ndarray,
    out: np.ndarray,
    grid_h: int,
    grid_w: int,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    *,
    parallel: bool = True,
) -> None:
    """torch's vertical uint8 pass fused with :func:`patchify_frame`: the same ``out`` as
    resizing fully with torch and patchifying, without writing the resized frame. ``bands``
    are the frame resized to its final width only (HWC views), top to bottom, as row bands
    (at most ``MAX_BANDS``; 3 channels, or 4 for Pillow's RGBX bytes); ``taps`` maps their
    rows to the ``grid_h * patch_size`` output rows (:func:`torch_taps.axis_taps`)."""
    p, m, t = patch_size, merge_size, temporal_patch_size
    if not 1 <= len(bands) <= MAX_BANDS:
        raise ValueError(f"1 to {MAX_BANDS} bands, got {len(bands)}")
    width = bands[0].shape[1]
    channels = bands[0].shape[-1]
    if channels not in (3, 4) or any(b.ndim != 3 or b.shape[1:] != (grid_w * p, channels)
                                     for b in bands):
        raise ValueError(f"bands of shapes {[b.shape for b in bands]} do not match grid width "
                         f"{grid_w}")
    edges = np.cumsum([0] + [b.shape[0] for b in bands])
    if len(taps.starts) != grid_h * p:
        raise ValueError(f"taps for {len(taps.starts)} rows, grid needs {grid_h * p}")
    if int(taps.starts[-1] + taps.sizes[-1]) > edges[-1]:
        raise ValueError(f"taps read past the frame's {edges[-1]} rows")
    _check_grid_and_out(out, grid_h, grid_w, p, m, t)
    serial = _KERNELS.kernel("vertical_patchify_serial")
    if serial is None:
        raise RuntimeError("the fused vertical kernel needs numba")
    sources = [kernel_source(b) for b in bands]
    if len({planar for _, planar, _ in sources}) > 1:  # one layout for all bands
        sources = [(np.ascontiguousarray(b).reshape(1, b.shape[0], width * channels), False,
                    channels) for b in bands]
    _, planar, cs = sources[0]
    padded = tuple(src for src, _, _ in sources) + (sources[-1][0],) * (MAX_BANDS - len(bands))
    band_starts = np.full(MAX_BANDS + 1, edges[-1], dtype=np.int64)
    band_starts[: len(edges)] = edges
    args = (padded, band_starts, taps.starts, taps.sizes, taps.weights, taps.precision, planar,
            cs, lut, out, grid_w, p, m, t)
    if not parallel:
        serial(*args)
        return
    _launch(_KERNELS.kernel("vertical_patchify_parallel"), serial, args)


# Bands of patch rows per worker in the fused resize: threads that claim bands as they go
# (``imaging.job_loop``) even out a core shared with another thread.
BANDS_PER_WORKER = 3

# Rows under which a frame's horizontal pass is not split over the pool: a band's block
# buffers and hand-off cost more than the rows save.
MIN_ROWS_PER_BAND = 64


def horizontal_pass(
    pixels: np.ndarray, width: int, pool: Executor | None = None, workers: int = 1
) -> np.ndarray:
    """torch's uint8 antialiased bicubic resize of ``pixels`` (HWC uint8, 3 channels or
    Pillow's RGBX bytes) to ``width`` columns, height unchanged: the same bytes
    as ``F.interpolate(..., antialias=True)`` (its horizontal pass, rounded to uint8), as an
    HWC view of channel planes (the memory layout torch's resize returns, and the one the
    patch kernels read fastest). Row bands run on ``pool``'s ``workers`` threads (GIL
    released). The memory is lent by the output pool, so a frame freed after its vertical pass
    is the next one's."""
    kernel = _KERNELS.kernel("horizontal_planes")
    if kernel is None:
        raise RuntimeError("the horizontal pass needs numba")
    if width < 1:
        raise ValueError(f"need HWC uint8 pixels and a positive width, got {width}")
    src, cs = _pixel_rows(pixels)
    height, in_w = pixels.shape[:2]
    out = empty_output((3, height, width), np.uint8)
    bands = max(1, min(workers, height // MIN_ROWS_PER_BAND)) if pool is not None else 1
    _run_bands(kernel, (src, cs), (*horizontal_taps(in_w, width, cs), out), height, bands, pool)
    return out.transpose(1, 2, 0)


def _pixel_rows(pixels: np.ndarray) -> tuple[np.ndarray, int]:
    """``(uint8 [H, W*cs] C-contiguous rows, cs)`` of HWC pixels of 3 or 4 channels."""
    if pixels.ndim != 3 or pixels.shape[2] not in (3, 4) or pixels.dtype != np.uint8:
        raise ValueError(f"need HWC uint8 pixels of 3 or 4 channels, got {pixels.dtype} "
                         f"{pixels.shape}")
    height, width, cs = pixels.shape
    return np.ascontiguousarray(pixels).reshape(height, width * cs), cs


def _run_bands(kernel: Any, head: tuple[Any, ...], tail: tuple[Any, ...], total: int,
               bands: int, pool: Executor | None) -> None:
    """``kernel(*head, a, b, *tail)`` over ``bands`` equal ranges ``a .. b`` of ``0 .. total``:
    on ``pool``'s threads, or on this one for a single band."""
    if bands <= 1 or pool is None:
        kernel(*head, 0, total, *tail)
        return
    edges = [round(k * total / bands) for k in range(bands + 1)]
    futures = [pool.submit(kernel, *head, a, b, *tail)
               for a, b in zip(edges[:-1], edges[1:], strict=True)]
    for future in futures:
        future.result()


def _fused_source(pixels: np.ndarray, taps: AxisTaps, out: np.ndarray, grid_h: int,
                  grid_w: int, p: int, m: int, t: int) -> tuple[np.ndarray, int, int]:
    """``(rows, cs, width)`` of ``pixels`` for the fused kernel, after the checks its callers
    share: vertical taps for the grid's rows within the frame, a grid of whole merge blocks,
    ``out`` of one row per patch."""
    src, cs = _pixel_rows(pixels)
    height, in_w = pixels.shape[:2]
    if len(taps.starts) != grid_h * p:
        raise ValueError(f"taps for {len(taps.starts)} rows, grid needs {grid_h * p}")
    if int(taps.starts[-1] + taps.sizes[-1]) > height:
        raise ValueError(f"taps read past the frame's {height} rows")
    _check_grid_and_out(out, grid_h, grid_w, p, m, t)
    return src, cs, in_w


def resize_patchify_frame(
    pixels: np.ndarray,
    taps: AxisTaps,
    lut: np.ndarray,
    out: np.ndarray,
    grid_h: int,
    grid_w: int,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    *,
    pool: Executor | None = None,
    workers: int = 1,
) -> None:
    """torch's whole resize of ``pixels`` (HWC uint8, 3 channels or Pillow's RGBX bytes) to
    ``grid_h * patch_size`` by ``grid_w * patch_size`` fused with :func:`patchify_frame`:
    the same ``out``, with neither the width-resized nor the resized frame ever stored.
    ``taps`` are the vertical pass's (:func:`torch_taps.axis_taps`); the horizontal pass's
    are computed here. Bands of patch rows (``BANDS_PER_WORKER`` per worker) run in one
    GIL-free job loop on this thread and on up to ``workers - 1`` of ``pool``'s
    (``imaging.job_loop``), else the whole frame on the calling thread. Measured on 2 cores against
    :func:`horizontal_pass` then :func:`vertical_patchify_frame`, same run: 1024² float32
    6.8 -> 4.0 ms, 2048² 18.8 -> 15.4 ms, 1920x1080 11.8 -> 7.8 ms."""
    p, m, t = patch_size, merge_size, temporal_patch_size
    kernel = _KERNELS.kernel("resize_patchify_band")
    if kernel is None:
        raise RuntimeError("the fused resize needs numba")
    src, cs, in_w = _fused_source(pixels, taps, out, grid_h, grid_w, p, m, t)
    args = (src, cs, *horizontal_taps(in_w, grid_w * p, cs), taps.starts, taps.sizes,
            taps.weights, taps.pairs, taps.precision, lut, out, grid_w, p, m, t)
    loop = _KERNELS.kernel("resize_patchify_band_jobs")
    if pool is None or workers <= 1 or grid_h <= 1 or loop is None:
        kernel(*args, 0, grid_h)
        return
    bands = min(grid_h, BANDS_PER_WORKER * workers)
    edges = np.array([round(k * grid_h / bands) for k in range(bands + 1)], np.int64)
    run_jobs(loop, bands, (edges, *args), workers, pool)


def resize_patchify_frames(
    frames: Sequence[tuple[np.ndarray, AxisTaps | None, np.ndarray, int, int]],
    lut: np.ndarray,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    *,
    pool: Executor | None = None,
    workers: int = 1,
) -> bool:
    """:func:`resize_patchify_frame` for every image of one call at once: ``(pixels, taps,
    out, grid_h, grid_w)`` each, all their bands (``BANDS_PER_WORKER`` per worker, shared out
    by rows) jobs of one GIL-free job loop. ``taps`` None: the image is already of its
    grid's size and is only patchified (:func:`patchify_frame`'s bytes), in the same loop.
    Why: a loop per image, or a pool task per image, takes the GIL back once per image, and
    beside a thread that runs Python (an API server's event loop) each takeback waits up to
    the switch interval (5 ms). False, with nothing written, where numba's loop is
    missing."""
    loop = _KERNELS.kernel("resize_patchify_frames_jobs")
    if loop is None:
        return False
    p, m, t = patch_size, merge_size, temporal_patch_size
    col = _KERNELS.columns("F_")
    table = np.zeros((len(frames), _KERNELS.compiled.FRAME_COLUMNS), np.int64)
    held: list[Any] = []  # every array the table points into, held until the loop is done
    per_image: list[list[tuple[int, int, int]]] = []
    total_rows = sum(grid_h for *_, grid_h, _ in frames) or 1
    row_length = 3 * t * p * p
    for k, (pixels, taps, out, grid_h, grid_w) in enumerate(frames):
        if out.dtype != lut.dtype:
            raise ValueError(f"out of {out.dtype} for a table of {lut.dtype}")
        row = table[k]
        if taps is None:
            src, cs = _plain_source(pixels, out, grid_h, grid_w, p, m, t)
            held += [src, out]
            for name, value in (
                ("F_SRC", src.ctypes.data), ("F_SRC_ROWS", src.shape[0]),
                ("F_ROW_BYTES", src.shape[1]), ("F_CS", cs), ("F_OUT", out.ctypes.data),
                ("F_PATCHES", out.shape[0]), ("F_GRID_W", grid_w), ("F_RESIZE", 0),
            ):
                row[col[name]] = int(value)
            per_image.append(_band_jobs(k, grid_h, total_rows, workers))
            continue
        src, cs, in_w = _fused_source(pixels, taps, out, grid_h, grid_w, p, m, t)
        xmin, xw, xpairs, xgather, xprecision = horizontal_taps(in_w, grid_w * p, cs)
        arrays = [np.ascontiguousarray(a) for a in (
            xmin, xw, xpairs, xgather, taps.starts, taps.sizes, taps.weights, taps.pairs)]
        xmin, xw, xpairs, xgather, starts, sizes, weights, ypairs = arrays
        held += [src, out, *arrays]
        for name, value in (
            ("F_RESIZE", 1),
            ("F_SRC", src.ctypes.data), ("F_SRC_ROWS", src.shape[0]),
            ("F_ROW_BYTES", src.shape[1]), ("F_CS", cs),
            ("F_XMIN", xmin.ctypes.data), ("F_OUT_W", xmin.shape[0]),
            ("F_XW", xw.ctypes.data), ("F_XW_COLS", xw.shape[1]),
            ("F_XPAIRS", xpairs.ctypes.data), ("F_XPAIR_COLS", xpairs.shape[1]),
            ("F_XGATHER", xgather.ctypes.data), ("F_XGATHER_BLOCKS", xgather.shape[0]),
            ("F_XGATHER_ROWS", xgather.shape[1]), ("F_XGATHER_COLS", xgather.shape[2]),
            ("F_XPRECISION", xprecision), ("F_STARTS", starts.ctypes.data),
            ("F_OUT_H", starts.shape[0]), ("F_SIZES", sizes.ctypes.data),
            ("F_WEIGHTS", weights.ctypes.data), ("F_WEIGHT_COLS", weights.shape[1]),
            ("F_YPAIRS", ypairs.ctypes.data), ("F_YPAIR_COLS", ypairs.shape[1]),
            ("F_PRECISION", taps.precision), ("F_OUT", out.ctypes.data),
            ("F_PATCHES", out.shape[0]), ("F_GRID_W", grid_w),
        ):
            row[col[name]] = int(value)
        per_image.append(_band_jobs(k, grid_h, total_rows, workers))
    # first bands of every image, then second bands...: threads that start together work on
    # different images (4 unresized 4032x3024 float32 images: 125.8 -> 117.0 ms, same run)
    jobs = [job for rank in itertools.zip_longest(*per_image) for job in rank if job is not None]
    job_table = np.array(jobs, np.int64).reshape(-1, 3)
    run_jobs(loop, len(job_table), (job_table, table, lut, row_length, p, m, t),
             workers if pool is not None else 1, pool)
    del held  # every image and table was read until here
    return True


def _band_jobs(k: int, grid_h: int, total_rows: int, workers: int) -> list[tuple[int, int, int]]:
    """Image ``k``'s jobs ``(k, g0, g1)``: its share of ``BANDS_PER_WORKER`` bands per worker
    over the call's ``total_rows`` patch rows, by its ``grid_h``."""
    bands = max(1, min(grid_h, math.ceil(BANDS_PER_WORKER * workers * grid_h / total_rows)))
    edges = even_edges(grid_h, bands)
    return [(k, int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _plain_source(pixels: np.ndarray, out: np.ndarray, grid_h: int, grid_w: int, p: int,
                  m: int, t: int) -> tuple[np.ndarray, int]:
    """``(rows, cs)`` of ``pixels`` already of the grid's size, after :func:`patchify_frame`'s
    checks."""
    src, cs = _pixel_rows(pixels)
    if pixels.shape[0] != grid_h * p or pixels.shape[1] != grid_w * p:
        raise ValueError(f"frame of shape {pixels.shape} does not match grid {grid_h}x{grid_w}")
    _check_grid_and_out(out, grid_h, grid_w, p, m, t)
    return src, cs
