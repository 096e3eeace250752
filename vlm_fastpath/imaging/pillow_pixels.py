"""Fast read access to an RGB ``PIL.Image``'s pixels, as Pillow's own 4-byte RGBX layout.

``np.asarray(image)`` packs Pillow's 4-byte RGBX pixels into a new 3-byte buffer in 64 KiB
chunks, then joins them, on one core: ~6 ms for a 2048x2048 image, 39-46 ms at 4032x3024,
before any resampling can start. Two faster ways, both giving the RGBX bytes (the kernels never
read the 4th byte):

- ``rgbx_view``: in place, through Pillow's Arrow export (``__arrow_c_array__``, Pillow 11.2+),
  when the image sits in one memory block (Pillow's blocks are 16 MiB: up to about 2048x2048).
  The capsules keep the memory alive: hold them while the view is in use.
- ``rgbx_copy``: for any RGB image, Pillow's C ``paste`` into an image that Pillow maps over our
  own numpy buffer (``Image.core.map_buffer``, what ``Image.frombuffer`` uses), in row strips on
  a thread pool (paste releases the GIL). 4032x3024: 3.5-5 ms against 46 ms for ``np.asarray``,
  same run. ``copy_rows`` copies a range of rows the same way, for readers that take an image
  a strip at a time instead of holding a copy of all of it (the Kimi resampler's bands).
- ``row_table``: the address of every row of an RGB image in Pillow's memory, read from
  Pillow's image header, so that GIL-free kernels copy rows themselves (``_numba_rows``).
  ``paste`` runs one Python call per strip, and beside a thread that runs Python each return
  to Python waits up to the switch interval (5 ms): a 4032x3024 photo (many blocks) took the
  Kimi processor 16 ms alone and 102 ms beside such a thread. The header is not an ABI, so
  its layout is probed once per process on an image over our own buffer (row addresses we
  know) and checked on every image (its size, pixel size and line size) before use.

Anything unexpected (another mode, an older Pillow without these, another layout) returns None
and the caller copies with ``np.asarray`` as before.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from concurrent.futures import Executor
from typing import Any

import numpy as np
from PIL import Image

from .. import settings


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def rgbx_view(image: Image.Image) -> tuple[np.ndarray, Any] | None:
    """``(pixels, keepalive)``: a read-only uint8 ``[H, W*4]`` view of an RGB image's RGBX
    memory and the capsules that keep it valid; None when Pillow cannot export it in place."""
    if image.mode != "RGB" or not hasattr(image, "__arrow_c_array__"):
        return None
    try:
        image.load()
        schema_capsule, array_capsule = image.__arrow_c_array__()
    except (ValueError, OSError, AttributeError):  # e.g. "rows are not contiguous in memory"
        return None
    try:
        schema = _ArrowSchema.from_address(_get_pointer(schema_capsule, b"arrow_schema"))
        array = _ArrowArray.from_address(_get_pointer(array_capsule, b"arrow_array"))
        width, height = image.size
        if schema.format != b"+w:4" or schema.n_children != 1 or array.n_children != 1:
            return None
        if schema.children[0].contents.format != b"C":
            return None
        child = array.children[0].contents
        if array.offset or child.offset or child.length != 4 * width * height:
            return None
        if child.n_buffers != 2 or not child.buffers[1]:
            return None
        raw = (ctypes.c_uint8 * child.length).from_address(child.buffers[1])
    except (ValueError, TypeError, OSError):
        return None
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(height, width * 4)
    pixels.setflags(write=False)
    return pixels, (schema_capsule, array_capsule, raw)


# Where Pillow's image header (``struct ImagingMemoryInstance``, src/libImaging/Imaging.h)
# holds the fields ``row_table`` reads, as byte offsets: (xsize, ysize, image, pixelsize,
# linesize). Pillow 12+ starts the header with a 4-byte ``ModeID``; earlier Pillow with a
# 7-byte mode string, which moves every field 4 bytes on (8 from ``palette``, 8-aligned).
_HEADER_LAYOUTS = {
    "mode-id": (16, 20, 48, 72, 76),
    "mode-string": (20, 24, 56, 80, 84),
}
_HEADER_BYTES = 88  # the fields above lie inside the first 88 bytes in both layouts
_IMAGING_CAPSULE = b"Pillow Imaging"


def _header(core: Any, layout: tuple[int, ...]) -> tuple[int, int, int, int, int]:
    """(xsize, ysize, pixelsize, linesize, address of the row table) of a Pillow core."""
    address = _get_pointer(core.ptr, _IMAGING_CAPSULE)
    raw = ctypes.string_at(address, _HEADER_BYTES)
    xs, ys, image, pixelsize, linesize = layout

    def int32(offset: int) -> int:
        return int.from_bytes(raw[offset:offset + 4], sys.byteorder, signed=True)

    return (int32(xs), int32(ys), int32(pixelsize), int32(linesize),
            int.from_bytes(raw[image:image + 8], sys.byteorder))


@functools.cache
def _header_layout() -> tuple[int, ...] | None:
    """The header layout of this Pillow, or None: probed on a 5x3 RGB image mapped over our
    own buffer, whose size fields must match in exactly one layout and whose row table must
    hold our buffer's row addresses; then on an image Pillow allocates itself, whose rows read
    through the table must equal what ``paste`` copies."""
    if getattr(Image.core, "map_buffer", None) is None or not _paste_copies_rows():
        return None
    width, height = 5, 3
    buffer = np.zeros((height, width * 4), np.uint8)
    try:
        core = Image.core.map_buffer(buffer, (width, height), "raw", 0, ("RGB", 0, 1))
        found = [
            layout for layout in _HEADER_LAYOUTS.values()
            if _header(core, layout)[:4] == (width, height, 4, width * 4)
        ]
        if len(found) != 1 or not found[0][2] % 8 == 0:
            return None
        table = _header(core, found[0])[4]
        if not table:
            return None
        rows = np.frombuffer((ctypes.c_int64 * height).from_address(table), np.int64)
        if rows.tolist() != [buffer.ctypes.data + y * width * 4 for y in range(height)]:
            return None
        own = Image.fromarray(np.arange(7 * 4 * 3, dtype=np.uint8).reshape(7, 4, 3))
        expected = np.zeros((7, 4 * 4), np.uint8)
        copy_rows(own, 0, 7, expected)
        header = _header(own.im, found[0])
        if header[:4] != (4, 7, 4, 16) or not header[4]:
            return None
        table = np.frombuffer((ctypes.c_int64 * 7).from_address(header[4]), np.int64)
        read = np.stack([np.frombuffer(ctypes.string_at(int(a), 16), np.uint8) for a in table])
        if not np.array_equal(read, expected):
            return None
    except (ValueError, TypeError, AttributeError, OSError):
        return None
    return found[0]


def row_table(image: Image.Image) -> tuple[np.ndarray, Any] | None:
    """``(rows, keepalive)``: the int64 address of each row of a loaded RGB image's RGBX
    memory, valid while ``keepalive`` (the image's Pillow core) is held and the image is not
    changed; None where this Pillow's header is not the probed layout or this image's header
    does not describe it (then ``copy_rows`` reads it)."""
    if image.mode != "RGB":
        return None
    layout = _header_layout()
    if layout is None:
        return None
    width, height = image.size
    try:
        core = image.im
        xsize, ysize, pixelsize, linesize, table = _header(core, layout)
    except (ValueError, TypeError, AttributeError):
        return None
    if (xsize, ysize, pixelsize, linesize) != (width, height, 4, width * 4) or not table:
        return None
    rows = np.frombuffer((ctypes.c_int64 * height).from_address(table), np.int64).copy()
    if not rows.all():
        return None
    rows.setflags(write=False)
    return rows, core


# Rows per strip of ``rgbx_copy`` at least: smaller copies are not worth a hand-off.
MIN_STRIP_ROWS = 256
JOBS_PER_WORKER = 3  # strips per thread of the GIL-free copy: evens out a busy core


@functools.cache
def _paste_copies_rows() -> bool:
    """Whether this Pillow's ``map_buffer`` + ``paste`` copy rows as :func:`copy_rows`
    expects: tried once per process on a tiny image, whose middle row must come out as its
    RGBX bytes (so a Pillow whose core works differently is found here, not in a worker)."""
    if getattr(Image.core, "map_buffer", None) is None:
        return False
    array = np.arange(3 * 2 * 3, dtype=np.uint8).reshape(3, 2, 3)
    row = np.zeros((1, 2 * 4), dtype=np.uint8)
    try:
        copy_rows(Image.fromarray(array), 1, 2, row)
    except (ValueError, TypeError, AttributeError):
        return False
    return np.array_equal(row.reshape(2, 4)[:, :3], array[1])


def can_copy_rows(image: Image.Image) -> bool:
    """Whether :func:`copy_rows` can read this image: RGB, not empty, on a Pillow whose
    ``paste`` copies rows as expected. Loads the image (``OSError`` for corrupt data, as
    ``np.asarray`` raises)."""
    if image.mode != "RGB" or not _paste_copies_rows():
        return False
    image.load()
    return image.size[0] > 0 and image.size[1] > 0


def copy_rows(image: Image.Image, top: int, bottom: int, out: np.ndarray) -> None:
    """Rows ``top .. bottom`` of a loaded RGB image as RGBX bytes into ``out`` (uint8
    ``[bottom - top, W*4]``, C-contiguous), copied by Pillow's C ``paste`` (GIL released)."""
    width, height = image.size
    if bottom <= top:
        return
    # Pillow's RGB image over ``out`` (4 bytes a pixel, as Pillow stores RGB); pasting the
    # whole source ``top`` rows higher clips it to those rows.
    target = Image.core.map_buffer(out, (width, bottom - top), "raw", 0, ("RGB", 0, 1))
    target.paste(image.im, (0, -top, width, height - top))


def _gather_copy(image: Image.Image, workers: int) -> np.ndarray | None:
    """:func:`rgbx_copy` by the GIL-free row kernel (``_numba_rows``) in job loops on the
    resize pool, where numba and :func:`row_table` can; else None."""
    if not settings.numba_allowed():
        return None
    table = row_table(image)
    if table is None:
        return None
    rows, core = table
    try:
        from . import _numba_rows
    except ImportError:
        return None
    from .job_loop import even_edges, run_jobs

    width, height = image.size
    pixels = np.empty((height, width * 4), dtype=np.uint8)
    parts = max(1, min(JOBS_PER_WORKER * workers, height // MIN_STRIP_ROWS))
    edges = even_edges(height, parts)
    run_jobs(_numba_rows.gather_row_jobs, len(edges) - 1, (edges, rows, pixels), workers)
    del core  # the rows were read until here
    pixels.setflags(write=False)
    return pixels


def rgbx_copy(
    image: Image.Image, pool: Executor | None = None, strips: int = 1
) -> np.ndarray | None:
    """A new read-only uint8 ``[H, W*4]`` array of an RGB image's RGBX bytes: copied through
    its row table by ``strips`` threads in GIL-free job loops where it can be
    (:func:`row_table`), else by Pillow itself, as ``strips`` row strips on ``pool`` when given;
    None when this Pillow cannot. Loads the image (``OSError`` for corrupt data, as
    ``np.asarray`` raises)."""
    if not can_copy_rows(image):
        return None
    gathered = _gather_copy(image, strips)
    if gathered is not None:
        return gathered
    width, height = image.size
    pixels = np.empty((height, width * 4), dtype=np.uint8)
    strips = max(1, min(strips, height // MIN_STRIP_ROWS))
    edges = [round(k * height / strips) for k in range(strips + 1)]

    def copy_strip(rows: tuple[int, int]) -> None:
        copy_rows(image, rows[0], rows[1], pixels[rows[0]:rows[1]])

    spans = list(zip(edges[:-1], edges[1:], strict=True))
    try:
        if pool is None or len(spans) == 1:
            for span in spans:
                copy_strip(span)
        else:
            list(pool.map(copy_strip, spans))
    except (ValueError, TypeError, AttributeError):  # a Pillow whose core works differently
        return None
    pixels.setflags(write=False)
    return pixels
