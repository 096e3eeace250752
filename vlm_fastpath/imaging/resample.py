"""Pillow-exact resize fused with pad, normalize and patchify, on all cores, GIL-free.

Pillow resizes one image on one core and stores the result; the processor then reads it
again to pad, normalize and patchify. Here a numba kernel does Pillow's two 8-bit passes
(the same integer weights, from :mod:`.pillow_coeffs`) band by band and writes each finished
row straight into its output patches, so the resized image is never stored, only 3 channels
are computed (Pillow computes RGBX), and the bands of one image run on every worker at once.
The source is read where Pillow keeps it (one memory block) or where a decoder put it, and
an image in many blocks (an RGB photo over about 4 MP) a strip of rows at a time that each
job copies out itself through the image's row table (:func:`strip_spans`,
:func:`.pillow_pixels.row_table`: no copy of the whole image is held). A call's bands, of
one frame or of all its frames, run in one GIL-free job loop (:mod:`.job_loop`; beside a
thread running Python, Kimi 2048² 45.4 -> 22.5 ms, 6.1 alone; three 4032x3024 photos 436 ->
56 ms, 37 alone). Frames that only Pillow's ``paste`` can read (no row table) run as tasks
of :mod:`.band_pool`.

Exactness depends on the Pillow release (the pass order changed, see
:mod:`.pillow_coeffs`), so the kernel runs only for releases whose rule a test verified
(:data:`VERIFIED_PILLOW`, recorded in ``ci/pillow/VERIFIED.md``) on x86-64 (where Pillow's
C evaluates the filters without fused multiply-adds, like numpy). Otherwise, or without
numba (``VLM_FASTPATH_NUMBA=0``), the processor resizes with Pillow itself: same bytes,
slower. :func:`resampler_info` says which one runs and why.
"""

from __future__ import annotations

import functools
import logging
import math
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import PIL
from PIL import Image

from .. import settings
from .band_pool import TaskGroup, get_band_pool
from .decode.decoded_image import held_rgb
from .errors import ImagingInputError
from .image_input import check_pixel_count, unwrap
from .job_loop import even_edges, run_jobs
from .lut import identity_lut
from .pillow_coeffs import pillow_coefficients, pillow_version, vertical_first
from .pillow_pixels import can_copy_rows, copy_rows, rgbx_view, row_table
from .resize_pool import THREADS_ENV, default_workers, pool_size
from .tap_windows import pad_windows

logger = logging.getLogger(__name__)


class PatchGrid(Protocol):
    """Where one frame goes: its resized size and its grid of ``patch_size`` patches (the
    patches beyond the resized image are padding). Kimi's ``ResizePlan`` is one."""

    new_width: int
    new_height: int
    grid_w: int
    grid_h: int
    patch_size: int


def _pillow_rgb(obj: Any) -> Image.Image:
    image = unwrap(obj)
    if not isinstance(image, Image.Image):
        raise ImagingInputError(
            f"unsupported image type {type(image).__name__}: expected PIL.Image.Image or a uint8 "
            "HxWx3 numpy array"
        )
    return image if image.mode == "RGB" else image.convert("RGB")


@dataclass(frozen=True)
class InputRules:
    """How the calling model turns a frame into RGB pixels, and which errors it raises.

    ``to_rgb`` takes any frame that is not a uint8 HxWx3 array (those are read as they are,
    after ``check_size``) and returns an RGB image, raising the model's own errors;
    ``input_error`` is the class this module raises for what it finds itself (a corrupt image
    whose pixels fail to load). The default takes PIL images and arrays only.
    """

    to_rgb: Callable[[Any], Image.Image] = _pillow_rgb
    check_size: Callable[[int, int], None] | None = check_pixel_count
    input_error: type[ImagingInputError] = ImagingInputError


PLAIN = InputRules()

VERIFIED_PILLOW: dict[str, str] = {
    "13.0.0": "vertical pass first when (H-oh) > 0 and (H-oh) > 2*(W-ow)",
    "12.3.0": "vertical pass first when H > 100*W and oh < H (Image.resize splits it)",
    "12.2.0": "vertical pass first when H > 100*W and oh < H (Image.resize splits it)",
    "12.1.1": "horizontal pass first",
    "11.3.0": "horizontal pass first",
}
"""Pillow releases whose pass-order rule ``tests/kimi_integration/test_resample*`` verify
against that release's own ``Image.resize`` (in-process or in a subprocess)."""

VERIFIED_MACHINES = frozenset({"x86_64", "AMD64"})

BANDS_PER_WORKER = 3  # enough bands per worker to even out uneven images and busy cores

# Source bytes one band copies out of Pillow's blocks at a time (an image too large for one
# Pillow block cannot be read in place): a 4032x3024 photo's whole copy was 47 MiB, 1.25x the
# 37 MiB float32 output; strips of this size keep every worker's copy small and in cache.
STRIP_BYTES = 2 << 20


class _Numba:
    """The lazily imported kernel module (or why it is missing), loaded once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.kernel: Callable[..., None] | None = None
        self.jobs: Callable[..., bool] | None = None  # the kernel's bands in a job loop
        self.frames_jobs: Callable[..., bool] | None = None  # a call's frames, one loop
        self.columns: dict[str, int] = {}  # its frame table's columns
        self.error: str | None = None

    def load(self) -> Callable[..., None] | None:
        if not self.loaded:
            with self.lock:
                if not self.loaded:
                    self._import()
                    self.loaded = True
        return self.kernel

    def _import(self) -> None:
        if not settings.numba_allowed():
            self.error = "numba disabled by VLM_FASTPATH_NUMBA=0"
            return
        try:
            from . import _numba_resample
        except ImportError as exc:
            self.error = f"numba not importable ({exc})"
            return
        self.kernel = _numba_resample.resize_patchify_band
        self.jobs = _numba_resample.resize_patchify_band_jobs
        self.frames_jobs = _numba_resample.resize_patchify_frames_jobs
        self.columns = {name: getattr(_numba_resample, name)
                        for name in dir(_numba_resample) if name.startswith("F_")}


_NUMBA = _Numba()


def _verdict() -> tuple[bool, str]:
    """(kernel allowed, why): checked on every call, so a changed Pillow is noticed."""
    version = PIL.__version__
    if version not in VERIFIED_PILLOW:
        return False, (
            f"Pillow {version} is not in the verified list {sorted(VERIFIED_PILLOW)}; "
            "resizing with Pillow itself"
        )
    machine = platform.machine()
    if machine not in VERIFIED_MACHINES:
        return False, f"machine {machine!r} not verified (x86-64 only); resizing with Pillow"
    if _NUMBA.load() is None:
        return False, f"{_NUMBA.error}; resizing with Pillow itself"
    return True, f"Pillow {version} verified: {VERIFIED_PILLOW[version]}"


def kernel_enabled() -> bool:
    """True when the fused numba resampler will run (else: Pillow's resize, same bytes)."""
    return _verdict()[0]


def resampler_info() -> dict[str, Any]:
    """Which resampler runs and why, for ``doctor`` and the benchmark."""
    enabled, reason = _verdict()
    return {
        "resampler": "numba-fused" if enabled else "pillow",
        "reason": reason,
        "pillow": PIL.__version__,
        "verified_pillow": sorted(VERIFIED_PILLOW),
        "threads": default_workers(),
        "threads_env": THREADS_ENV,
    }


# -- coefficients and sources ------------------------------------------------------------------
def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    for array in arrays:
        array.setflags(write=False)
    return arrays


_NO_TAPS = _frozen(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros((0, 1), np.int32))
_NO_PADDED_TAPS = _frozen(np.zeros(0, np.int32), np.zeros((0, 1), np.int64))


@functools.lru_cache(maxsize=256)
def _axis(in_size: int, out_size: int, filter_name: str) -> tuple[np.ndarray, ...]:
    """int32 (first tap, tap count, weights) of one axis, read-only; none when unchanged."""
    if in_size == out_size:
        return _NO_TAPS
    xmin, count, weights = pillow_coefficients(in_size, out_size, filter_name)
    return _frozen(xmin.astype(np.int32), count.astype(np.int32), np.ascontiguousarray(weights))


@functools.lru_cache(maxsize=256)
def _padded_axis(in_size: int, out_size: int, filter_name: str) -> tuple[np.ndarray, ...]:
    """The same taps, every window ``max(count)`` long: (first tap, int64 weights)
    (:func:`.tap_windows.pad_windows`)."""
    if in_size == out_size:
        return _NO_PADDED_TAPS
    xmin, count, weights = _axis(in_size, out_size, filter_name)
    return pad_windows(xmin, count, weights, in_size)


def _readonly(array: np.ndarray) -> np.ndarray:
    # One numba specialization for every caller: always a read-only C-contiguous view.
    view = np.ascontiguousarray(array).view()
    view.setflags(write=False)
    return view


def frame_source(
    frame: Any, rules: InputRules = PLAIN
) -> tuple[np.ndarray | Image.Image, int, Any]:
    """``(source, bytes per pixel, keepalive)`` of any supported input, as
    ``convert("RGB")`` makes it: uint8 ``[H, W*cs]`` RGB(X) bytes, or an RGB image held in
    many Pillow blocks, whose rows the reader copies itself (:func:`.pillow_pixels.copy_rows`,
    ``cs`` 4) a strip at a time.

    A uint8 HxWx3 array is used as it is (no PIL round trip); an RGB image is read in place
    when Pillow can export its memory (RGBX, ``cs`` = 4: :mod:`.pillow_pixels`); everything
    else is converted with the caller's ``rules.to_rgb`` first.
    """
    obj = unwrap(frame)
    if isinstance(obj, np.ndarray) and obj.dtype == np.uint8 and obj.ndim == 3:
        if obj.shape[2] == 3:
            if rules.check_size is not None:
                rules.check_size(obj.shape[1], obj.shape[0])
            return _readonly(obj).reshape(obj.shape[0], obj.shape[1] * 3), 3, None
    image = rules.to_rgb(frame)
    held = held_rgb(image)  # decoded by imaging.decode, not yet copied into Pillow's store
    if held is not None:
        return held.reshape(held.shape[0], held.shape[1] * 3), 3, None
    try:
        view = rgbx_view(image)
        if view is not None:
            return view[0], 4, view[1]
        if can_copy_rows(image):
            return image, 4, None
        array = np.asarray(image)
    except OSError as exc:  # truncated or corrupt encoded data surfaces at load time
        raise rules.input_error(f"cannot decode image: {exc}") from exc
    return _readonly(array.reshape(array.shape[0], array.shape[1] * 3)), 3, None


def frame_pixels(frame: Any, rules: InputRules = PLAIN) -> tuple[np.ndarray, int, Any]:
    """``(pixels, bytes per pixel, keepalive)``: :func:`frame_source`, with an image in many
    Pillow blocks copied out whole (RGBX)."""
    source, cs, keepalive = frame_source(frame, rules)
    if isinstance(source, Image.Image):
        whole = np.empty((source.size[1], source.size[0] * 4), np.uint8)
        copy_rows(source, 0, source.size[1], whole)
        return _readonly(whole), 4, None
    return source, cs, keepalive


# -- the kernel --------------------------------------------------------------------------------
def _band_args(
    pixels: np.ndarray | Image.Image, cs: int, out_w: int, out_h: int, filter_name: str
) -> tuple[Any, ...]:
    """The kernel's arguments up to the pass order (``pixels`` first: for a strip source,
    the image, which :func:`_run_strip_band` replaces by each strip and its first row)."""
    if isinstance(pixels, Image.Image):
        in_w, in_h = pixels.size
    else:
        in_h, in_w = pixels.shape[0], pixels.shape[1] // cs
    xmin, xw = _padded_axis(in_w, out_w, filter_name)
    ymin, ycnt, yw = _axis(in_h, out_h, filter_name)
    order = vertical_first(in_w, in_h, out_w, out_h, pillow_version())
    return (pixels, cs, 0, in_h, xmin, xw, ymin, ycnt, yw, in_w != out_w, in_h != out_h, order)


def _run_band(args: tuple[Any, ...], lut: np.ndarray, out: np.ndarray, grid_w: int, p: int,
              g0: int, g1: int, keepalive: Any = None) -> None:
    """One band; ``keepalive`` holds whatever keeps ``args[0]``'s memory valid."""
    kernel = _NUMBA.load()
    assert kernel is not None
    kernel(*args, lut, out, grid_w, p, g0, g1)


def strip_spans(ymin: np.ndarray, ycnt: np.ndarray, need_v: bool, in_h: int, p: int,
                g0: int, g1: int, budget: int) -> list[tuple[int, int, int, int]]:
    """Patch rows ``g0 .. g1`` cut into runs ``(a, b, top, bottom)``: patch rows ``a .. b``
    read source rows ``top .. bottom`` only, at most ``budget`` of them unless one patch row
    alone needs more. The vertical taps say which rows an output row reads (Pillow's windows
    only move down), or without a vertical pass the output row is its source row."""
    out_h = ymin.shape[0] if need_v else in_h
    spans: list[tuple[int, int, int, int]] = []
    a, top, bottom = g0, -1, -1
    for g in range(g0, g1):
        y0, y1 = g * p, min((g + 1) * p, out_h)
        if y1 <= y0:  # padding rows only: nothing to read
            continue
        if need_v:
            lo = int(ymin[y0:y1].min())
            hi = int((ymin[y0:y1] + ycnt[y0:y1]).max())
        else:
            lo, hi = y0, y1
        if top >= 0 and max(bottom, hi) - min(top, lo) > budget:
            spans.append((a, g, top, bottom))
            a, top, bottom = g, -1, -1
        top = lo if top < 0 else min(top, lo)
        bottom = max(bottom, hi)
    spans.append((a, g1, max(top, 0), max(bottom, 0)))
    return spans


def _run_strip_band(args: tuple[Any, ...], lut: np.ndarray, out: np.ndarray, grid_w: int,
                    p: int, g0: int, g1: int) -> None:
    """One band of an image held in many Pillow blocks: each run of :func:`strip_spans` is
    copied out of Pillow's memory into one small buffer of this band, then resampled from
    there; only that buffer, never a copy of the whole image, is held."""
    kernel = _NUMBA.load()
    assert kernel is not None
    image, cs, _, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v, order = args
    row_bytes = image.size[0] * 4
    spans = strip_spans(ymin, ycnt, need_v, in_h, p, g0, g1, max(1, STRIP_BYTES // row_bytes))
    buffer = np.empty((max(b - t for _, _, t, b in spans), row_bytes), np.uint8)
    for a, b, top, bottom in spans:
        copy_rows(image, top, bottom, buffer[: bottom - top])
        strip = buffer[: bottom - top].view()
        strip.setflags(write=False)  # the kernel's one read-only specialization
        kernel(strip, cs, top, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v, order, lut, out,
               grid_w, p, a, b)


def band_count(grid_h: int, share: float, workers: int) -> int:
    """Bands for a frame holding ``share`` of a call's rows: ~BANDS_PER_WORKER per worker."""
    return max(1, min(grid_h, math.ceil(BANDS_PER_WORKER * workers * share)))


def submit_frame(
    group: TaskGroup,
    frame: Any,
    plan: PatchGrid,
    dest: np.ndarray,
    lut: np.ndarray,
    bands: int,
    rules: InputRules = PLAIN,
    filter_name: str = "bicubic",
) -> None:
    """Decode ``frame`` here, then queue its bands (urgent: they free the source first)."""
    source, cs, keepalive = frame_source(frame, rules)
    args = _band_args(source, cs, plan.new_width, plan.new_height, filter_name)
    lut = _readonly(lut)
    _submit_bands(group, args, lut, dest, plan.grid_w, plan.patch_size, plan.grid_h, bands,
                  keepalive, urgent=True)


def _band_jobs(args: tuple[Any, ...], lut: np.ndarray, dest: np.ndarray, grid_w: int, p: int,
               grid_h: int, workers: int) -> None:
    """Patch rows ``0 .. grid_h`` of a frame held as one array, in ~BANDS_PER_WORKER bands per
    worker, each thread running the bands it claims inside one GIL-free call (``job_loop``:
    beside a thread running Python, one takeback of the GIL per thread instead of two per
    band)."""
    bands = band_count(grid_h, 1.0, workers)
    edges = even_edges(grid_h, bands)
    jobs = _NUMBA.jobs
    assert jobs is not None
    run_jobs(jobs, len(edges) - 1, (edges, *args, lut, dest, grid_w, p), workers)


def _one_frame_jobs(args: tuple[Any, ...], lut: np.ndarray, dest: np.ndarray, grid_w: int,
                    p: int, grid_h: int) -> bool:
    """One frame's patch rows in job loops, from one array or from Pillow's blocks through
    their row table; False (nothing done) for an image whose rows only ``paste`` can read."""
    source = args[0]
    if not isinstance(source, Image.Image):
        _band_jobs(args, lut, dest, grid_w, p, grid_h, pool_size())
        return True
    table = row_table(source)
    if table is None:
        return False
    rows, core = table
    done = _frames_jobs([(args, dest, grid_w, grid_h, rows)], lut, p, pool_size())
    del core  # the rows were read until here
    return done


_TAP_DTYPES = (np.int32, np.int64, np.int32, np.int32, np.int32)  # xmin xw ymin ycnt yw


def _frames_jobs(frames: list[tuple[tuple[Any, ...], np.ndarray, int, int, Any]],
                 lut: np.ndarray, p: int, workers: int) -> bool:
    """Patch rows of every frame of a call in one job loop (``(args, dest, grid_w, grid_h,
    rows)`` each; ``rows``: the row table of an image in many Pillow blocks, else None):
    bands of ~BANDS_PER_WORKER per worker spread over the frames by their rows, strips of
    :func:`strip_spans` for images read through their row table. Beside a thread running
    Python a call then takes the GIL back once, not once or twice per band. The kernel
    reads each frame's arrays by address from a table, so the caller holds them (and their
    keepalives) until this returns. False (nothing done) where an array is not of the
    kernel's layout."""
    col = _NUMBA.columns
    table = np.zeros((len(frames), len(col)), np.int64)
    jobs: list[tuple[int, int, int, int, int]] = []
    strip_bytes = 0
    total_rows = sum(grid_h for _, _, _, grid_h, _ in frames) or 1
    for k, (args, dest, grid_w, grid_h, rows) in enumerate(frames):
        source, cs, _, in_h, xmin, xw, ymin, ycnt, yw, need_h, need_v, order = args
        taps = (xmin, xw, ymin, ycnt, yw)
        if any(t.dtype != d or not t.flags.c_contiguous for t, d in
               zip(taps, _TAP_DTYPES, strict=True)):
            return False
        if dest.dtype != lut.dtype or not dest.flags.c_contiguous or dest.shape[1:] != (3, p, p):
            return False
        row = table[k]
        if rows is None:
            if not (isinstance(source, np.ndarray) and source.dtype == np.uint8
                    and source.ndim == 2 and source.flags.c_contiguous):
                return False
            row[col["F_SRC"]], row[col["F_SRC_ROWS"]] = source.ctypes.data, source.shape[0]
            row_bytes = source.shape[1]
            bands = band_count(grid_h, grid_h / total_rows, workers)
            edges = even_edges(grid_h, bands)
            jobs += [(k, int(a), int(b), 0, 0)
                     for a, b in zip(edges[:-1], edges[1:], strict=True)]
        else:
            row[col["F_ROWS"]] = rows.ctypes.data
            row_bytes = source.size[0] * 4
            spans = strip_spans(ymin, ycnt, need_v, in_h, p, 0, grid_h,
                                max(1, STRIP_BYTES // row_bytes))
            jobs += [(k, a, b, top, bottom) for a, b, top, bottom in spans]
            strip_bytes = max(strip_bytes, max(b - t for _, _, t, b in spans) * row_bytes)
        for name, value in (("F_ROW_BYTES", row_bytes), ("F_CS", cs), ("F_IN_H", in_h),
                            ("F_NEED_H", need_h), ("F_NEED_V", need_v), ("F_ORDER", order),
                            ("F_GRID_W", grid_w), ("F_OUT", dest.ctypes.data),
                            ("F_PATCHES", dest.shape[0]), ("F_XMIN", xmin.ctypes.data),
                            ("F_OUT_W", xw.shape[0]), ("F_XW", xw.ctypes.data),
                            ("F_TAPS", xw.shape[1]), ("F_YMIN", ymin.ctypes.data),
                            ("F_OUT_H", ymin.shape[0]), ("F_YCNT", ycnt.ctypes.data),
                            ("F_YW", yw.ctypes.data), ("F_YW_COLS", yw.shape[1])):
            row[col[name]] = int(value)
    loop = _NUMBA.frames_jobs
    assert loop is not None
    job_table = np.array(jobs, np.int64).reshape(-1, 5)
    run_jobs(loop, len(job_table), (job_table, table, strip_bytes, lut, p), workers)
    return True


def array_band_args(pixels: np.ndarray, width: int, height: int) -> tuple[Any, ...]:
    """The band kernel's arguments for RGB uint8 ``pixels`` (``[H, W, 3]``, C-contiguous)
    resized to ``width`` x ``height`` (Pillow's bicubic), read in place."""
    source = _readonly(pixels).reshape(pixels.shape[0], pixels.shape[1] * 3)
    return _band_args(source, 3, width, height, "bicubic")


def source_rows_read(args: tuple[Any, ...], p: int, g0: int, g1: int) -> int:
    """How many source rows, from the top, patch rows ``g0 .. g1`` read (0: only padding)."""
    in_h, ymin, ycnt, need_v = args[3], args[6], args[7], args[10]
    out_h = ymin.shape[0] if need_v else in_h
    lo, hi = g0 * p, min(g1 * p, out_h)
    if hi <= lo:
        return 0
    return int((ymin[lo:hi] + ycnt[lo:hi]).max()) if need_v else hi


def run_patch_rows(args: tuple[Any, ...], lut: np.ndarray, dest: np.ndarray, grid_w: int,
                   p: int, g0: int, g1: int, workers: int) -> None:
    """Patch rows ``g0 .. g1`` of a frame held as one array (``array_band_args``), in bands
    of one GIL-free job loop on up to ``workers`` threads."""
    if _NUMBA.load() is None or _NUMBA.jobs is None:
        raise RuntimeError(f"the resampler's numba kernels are missing: {_NUMBA.error}")
    edges = g0 + even_edges(g1 - g0, band_count(g1 - g0, 1.0, workers))
    run_jobs(_NUMBA.jobs, len(edges) - 1, (edges, *args, _readonly(lut), dest, grid_w, p),
             workers)


def _submit_bands(group: TaskGroup, args: tuple[Any, ...], lut: np.ndarray, dest: np.ndarray,
                  grid_w: int, p: int, grid_h: int, bands: int, keepalive: Any,
                  urgent: bool = False) -> None:
    """Queue patch rows ``0 .. grid_h`` of one frame as ``bands`` tasks of ``_run_band``."""
    edges = [round(i * grid_h / bands) for i in range(bands + 1)]
    strips = isinstance(args[0], Image.Image)
    for g0, g1 in zip(edges[:-1], edges[1:], strict=True):
        if g1 <= g0:
            continue
        if strips:
            group.submit(_run_strip_band, args, lut, dest, grid_w, p, g0, g1, urgent=urgent)
        else:
            group.submit(_run_band, args, lut, dest, grid_w, p, g0, g1, keepalive, urgent=urgent)


def resize_patchify(
    jobs: list[tuple[Any, PatchGrid, np.ndarray]], lut: np.ndarray, rules: InputRules = PLAIN
) -> None:
    """Fill each ``dest`` (``[patches, 3, p, p]``, dtype of ``lut``) from its frame.

    Safe from many threads at once: each call waits for its own tasks only.
    """
    if len(jobs) == 1:  # one frame held as one array: its bands in job loops
        frame, plan, dest = jobs[0]
        source, cs, keepalive = frame_source(frame, rules)
        args = _band_args(source, cs, plan.new_width, plan.new_height, "bicubic")
        if _one_frame_jobs(args, _readonly(lut), dest, plan.grid_w, plan.patch_size,
                           plan.grid_h):
            del keepalive, args  # the source's memory was read until here
            return
        jobs = [(source, plan, dest)]  # rows only ``paste`` reads: a strip per band task
    elif _many_frames_jobs(jobs, lut, rules):
        return
    pool = get_band_pool()
    group = pool.group()
    total_rows = sum(plan.grid_h for _, plan, _ in jobs) or 1
    try:
        for index, (frame, plan, dest) in enumerate(jobs):
            bands = band_count(plan.grid_h, plan.grid_h / total_rows, pool.workers)
            if index == 0:
                # The first frame is decoded here: its bands start without a hand-off.
                submit_frame(group, frame, plan, dest, lut, bands, rules)
            else:
                group.submit(submit_frame, group, frame, plan, dest, lut, bands, rules)
    except BaseException as exc:
        group.fail(exc)
    group.wait()


def _many_frames_jobs(jobs: list[tuple[Any, PatchGrid, np.ndarray]], lut: np.ndarray,
                      rules: InputRules) -> bool:
    """Several frames in one job loop (:func:`_frames_jobs`), each read here first (the
    conversions a frame needs run on this thread); False (nothing written) where one of them
    is read only by ``paste`` or the kernel's layout does not hold."""
    frames = []
    keep = []
    for frame, plan, dest in jobs:
        source, cs, keepalive = frame_source(frame, rules)
        rows = None
        if isinstance(source, Image.Image):
            table = row_table(source)
            if table is None:
                return False
            rows, core = table
            keep.append(core)
        keep.append(keepalive)
        args = _band_args(source, cs, plan.new_width, plan.new_height, "bicubic")
        frames.append((args, dest, plan.grid_w, plan.grid_h, rows))
    p = jobs[0][1].patch_size
    if any(plan.patch_size != p for _, plan, _ in jobs):
        return False
    done = _frames_jobs(frames, _readonly(lut), p, pool_size())
    del keep, frames  # every frame's memory was read until here
    return done


_WARM = {"done": False, "lock": threading.Lock()}


def warm_up() -> float:
    """Load (or compile) the kernel's specializations now; returns the seconds it took.

    Processors call this when they are built, which the engines do at start-up: the first
    request then does not pay the kernel's cache load (~0.5 s on 2 cores; a compile when
    numba's cache is cold). One tiny resize per specialization the processors use: float32
    and uint8 tables, each from a numpy array and from Pillow's RGBX memory, by the band
    kernel and by its job loops (one array, and a call's frames, from arrays and from
    Pillow's rows). Once per process;
    a failure here is logged and left to the real call to report.
    """
    if _WARM["done"] or not kernel_enabled():
        return 0.0
    with _WARM["lock"]:
        if _WARM["done"]:
            return 0.0
        start = time.perf_counter()
        try:
            array = np.arange(5 * 6 * 3, dtype=np.uint8).reshape(5, 6, 3)
            for frame in (array, Image.fromarray(array)):
                pixels, cs, keepalive = frame_pixels(frame)
                args = _band_args(pixels, cs, 3, 2, "bicubic")
                for table in (_identity_lut(), _float_lut()):
                    out = np.empty((1, 3, 3, 3), dtype=table.dtype)
                    _run_band(args, _readonly(table), out, 1, 3, 0, 1, keepalive)
                    _band_jobs(args, _readonly(table), out, 1, 3, 1, 1)
                    frames = [(args, out, 1, 1, None)]
                    rows = row_table(frame) if isinstance(frame, Image.Image) else None
                    if rows is not None:  # read as an image in many blocks is
                        frames.append((_band_args(frame, 4, 3, 2, "bicubic"), out, 1, 1,
                                       rows[0]))
                    _frames_jobs(frames, _readonly(table), 3, 1)  # the frames' loop
        except Exception:  # noqa: BLE001 - never fail a processor's construction here
            logger.warning("vlm-fastpath: resampler warm-up failed", exc_info=True)
        _WARM["done"] = True
        return time.perf_counter() - start


@functools.cache
def _float_lut() -> np.ndarray:
    return _identity_lut().astype(np.float32)


def resize_rgb(frame: Any, width: int, height: int, filter_name: str = "bicubic",
               rules: InputRules = PLAIN) -> np.ndarray:
    """``convert("RGB").resize((width, height), filter)`` as a new HxWx3 uint8 array,
    bit-exact: the bare resampler (no patches), with row bands on every worker of the band
    pool. Pillow itself resizes where the kernel is not enabled.

    The fused kernel with 1-pixel patches and an identity table, whose patch-major output is
    exactly the HxWx3 image. For processors whose layout is not Kimi's (Qwen's PIL mode): the
    resized image is stored once, then patchified by that processor's kernel.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"target size must be positive, got {width}x{height}")
    array = unwrap(frame)
    if isinstance(array, np.ndarray) and (
        array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3
    ):
        raise ValueError(f"need a uint8 HxWx3 array, got {array.dtype} {array.shape}")
    if not kernel_enabled():
        image = Image.fromarray(array) if isinstance(array, np.ndarray) else rules.to_rgb(frame)
        resample = Image.Resampling[filter_name.upper()]
        return np.asarray(image.resize((width, height), resample)).copy()
    source, cs, keepalive = frame_source(frame, rules)
    args = _band_args(source, cs, width, height, filter_name)
    out = np.empty((height * width, 3, 1, 1), dtype=np.uint8)
    if _one_frame_jobs(args, _readonly(_identity_lut()), out, width, 1, height):
        del keepalive, args  # the source's memory was read until here
        return out.reshape(height, width, 3)
    pool = get_band_pool()
    group = pool.group()
    try:
        _submit_bands(group, args, _readonly(_identity_lut()), out, width, 1, height,
                      band_count(height, 1.0, pool.workers), keepalive)
    except BaseException as exc:
        group.fail(exc)
    group.wait()
    return out.reshape(height, width, 3)


@functools.cache
def _identity_lut() -> np.ndarray:
    return identity_lut()
