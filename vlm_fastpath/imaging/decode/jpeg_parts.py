"""One JPEG decoded on several cores, where its restart markers allow it.

Why: a large JPEG decodes on one core (libjpeg-turbo, Pillow's or simplejpeg's), and that
is most of its time in the API server (issue #30); no maintained library streams rows at
libjpeg-turbo's speed (``benchmarks/results/decode_streaming.md``). A JPEG written with
restart markers (some camera and hardware encoders write them) is a chain of entropy segments
that each start afresh: no DC prediction and no bit position carries across a marker.
How: the bytes are cut only at restart markers that begin an MCU row, never inside one. Each
part is a JPEG of its own: the original headers with the frame height changed, then its
segments and an EOI, decoded by the same library as the whole image (the ``jpeg-parts`` row
of ``verified.RULES``) on the resize pool. No pixel is computed by us.
The only thing a part cannot know is what lies beyond its edges, which matters for chroma
upsampling with vertical context (4:2:0, 4:4:0, ``vmax == 2``): libjpeg-turbo's fancy
upsampling gives output row ``2k`` the chroma rows ``k - 1`` and ``k``, and row ``2k + 1`` rows
``k`` and ``k + 1``, repeating the edge row past an edge. So a part above a cut decodes one
row past the cut (an even row: its context is inside the part), and a part below it gives up
its first row (the one whose context is outside). Parts below a cut then decode into scratch
memory and copy what they keep, as both sides write the cut's row. Without vertical
subsampling (4:4:4, 4:2:2) no row needs context across a cut, and every part decodes
straight into the output. Identity with the whole-image decode and with Pillow is a test
(``tests/imaging/test_decode_jpeg_parts.py``), over sampling factors, restart intervals,
sizes and cut positions.

A cut needs: a single interleaved baseline (SOF0/SOF1) scan with a restart interval, the
markers numbered as the standard says and as many as the MCU count implies, nothing but
restart markers inside the entropy data, a marker that starts the part's first MCU row and
is ``RST7`` (so the part's own markers count from ``RST0`` as a fresh stream's do), and for
``vmax == 2`` a marker after the next MCU row too (the part above then ends at a marker, with
no entropy data its decoder would not read). Anything else: the whole-image decode.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from ..output_pool import empty_output
from .codecs import Decoder

# Pixels per part at least: below this a hand-off costs more than the rows it moves (2048²
# in two parts: 11.9 -> 10.3 ms; 1021x777: 2.3 -> 2.9 ms, one process, same run).
MIN_PART_PIXELS = 2_000_000
_SOF_SEQUENTIAL = (0xC0, 0xC1)  # baseline and extended sequential, Huffman
_EOI = 0xD9
_READ = frozenset((*_SOF_SEQUENTIAL, 0xDD, 0xDA))  # the segments whose contents are read
_RST0 = 0xD0


@dataclass(frozen=True)
class Layout:
    """Where a restart-marked JPEG can be cut (offsets into its bytes)."""

    height_at: int  # offset of the frame header's 16-bit height
    width: int
    height: int
    mcu_height: int  # 8 * vmax
    vertical_context: bool  # vmax == 2: upsampling reads across MCU rows
    mcus_per_row: int
    interval: int  # MCUs per restart interval
    scan_start: int  # first entropy-coded byte
    eoi: int  # offset of the EOI marker
    markers: np.ndarray  # int64 offsets of RST markers, in order

    def boundary(self, row: int) -> int | None:
        """Offset of the first entropy byte of MCU row ``row`` when a restart marker (or the
        scan's start) begins it, else None."""
        mcu = row * self.mcus_per_row
        if mcu % self.interval:
            return None
        segment = mcu // self.interval
        if segment == 0:
            return self.scan_start
        return int(self.markers[segment - 1]) + 2

    def fresh_start(self, row: int) -> bool:
        """MCU row ``row`` starts after an ``RST7``: a part from there counts from RST0."""
        mcu = row * self.mcus_per_row
        return mcu % self.interval == 0 and (mcu // self.interval) % 8 == 0


def layout(data: bytes) -> Layout | None:
    """The cut layout of ``data``, or None when it cannot be decoded in parts."""
    header = _frame_and_scan(data)
    if header is None:
        return None
    height_at, width, height, hmax, vmax, interval, scan_start = header
    if interval == 0 or height == 0 or width == 0 or hmax not in (1, 2) or vmax not in (1, 2):
        return None
    body = np.frombuffer(data, np.uint8)[scan_start:]
    ff = np.flatnonzero(body[:-1] == 0xFF)
    follow = body[ff + 1]
    marks = ff[(follow != 0x00) & (follow != 0xFF)]  # stuffed bytes and fill bytes are not
    kinds = body[marks + 1]
    others = np.flatnonzero((kinds < _RST0) | (kinds > _RST0 + 7))
    if len(others) == 0 or kinds[others[0]] != _EOI:
        return None  # the scan ends at another marker (DNL, a second scan) or never ends
    last = int(others[0])  # anything after the EOI (a second image, MPF) is not the scan's
    rst = marks[:last]
    numbers = kinds[:last].astype(np.int64) - _RST0
    mcu_height = 8 * vmax
    mcus_per_row = -(-width // (8 * hmax))
    rows = -(-height // mcu_height)
    expected = -(-(rows * mcus_per_row) // interval) - 1
    if len(rst) != expected or not np.array_equal(numbers, np.arange(len(rst)) % 8):
        return None  # other markers inside the scan, a lost marker, or a second scan
    return Layout(height_at, width, height, mcu_height, vmax == 2, mcus_per_row, interval,
                  scan_start, scan_start + int(marks[last]), rst + scan_start)


def _frame_and_scan(data: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """(height offset, width, height, hmax, vmax, restart interval, scan start) of a single
    interleaved sequential scan, walking the header's marker segments; None otherwise."""
    if not data.startswith(b"\xff\xd8"):
        return None
    pos, end = 2, len(data)
    frame = None
    interval = 0
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        kind = data[pos + 1]
        if kind == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2 or pos + 2 + length > end:
            return None
        # sliced only where read: APPn segments (EXIF, ICC profiles) can be large
        segment = data[pos + 4 : pos + 2 + length] if kind in _READ else b""
        if kind in _SOF_SEQUENTIAL:
            if len(segment) < 6:
                return None
            _, height, width, count = struct.unpack(">BHHB", segment[:6])
            if count != 3 or len(segment) < 6 + 3 * count:
                return None
            factors = [segment[7 + 3 * i] for i in range(count)]
            frame = (pos + 5, width, height, max(f >> 4 for f in factors),
                     max(f & 15 for f in factors), count)
        elif 0xC2 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):
            return None  # progressive, lossless, arithmetic or hierarchical
        elif kind == 0xDD and len(segment) >= 2:
            (interval,) = struct.unpack(">H", segment[:2])
        elif kind == 0xDA:
            if frame is None or not segment or segment[0] != frame[5]:
                return None  # a scan of some components only: more scans follow
            return (*frame[:5], interval, pos + 2 + length)
        pos += 2 + length
    return None


@dataclass(frozen=True)
class Part:
    """MCU rows from ``first_row`` decoded as a JPEG ``height`` rows high, rows ``keep_from
    ..`` of it written to the output's same rows (from ``first_row * mcu_height``)."""

    first_row: int  # MCU row
    height: int  # pixel rows the part decodes
    keep_from: int  # first of them that is kept (1 below a cut with vertical context)
    begin: int  # offsets of its entropy data in the source
    stop: int


def plan(lay: Layout, parts: int) -> list[Part] | None:
    """``parts`` parts of about equal height (fewer where cuts are missing), or None when no
    cut fits."""
    rows = -(-lay.height // lay.mcu_height)
    extra = 1 if lay.vertical_context else 0
    cuts: list[int] = []
    for k in range(1, parts):
        wanted = max(rows * k // parts, cuts[-1] + 1 if cuts else 1)
        row = next((r for r in range(wanted, rows - 1) if lay.fresh_start(r) and (
            not extra or lay.boundary(r + 1) is not None)), None)
        if row is None:
            break
        cuts.append(row)
    if not cuts:
        return None
    out = []
    firsts = [0, *cuts]
    for i, first in enumerate(firsts):
        begin = lay.boundary(first)
        assert begin is not None
        if i + 1 < len(firsts):
            cut = firsts[i + 1]
            end_pixel = cut * lay.mcu_height + extra
            after = lay.boundary(cut + extra)
            assert after is not None
            stop = after - 2  # the marker that begins the next segment is left out
        else:
            end_pixel, stop = lay.height, lay.eoi
        keep = extra if i else 0
        out.append(Part(first, end_pixel - first * lay.mcu_height, keep, begin, stop))
    return out


def part_bytes(data: bytes, lay: Layout, part: Part) -> bytes:
    """The part as a JPEG of its own: the headers with its height, its segments, an EOI."""
    header = bytearray(data[: lay.scan_start])
    header[lay.height_at : lay.height_at + 2] = struct.pack(">H", part.height)
    return b"".join((header, data[part.begin : part.stop], b"\xff\xd9"))


def decode_in_parts(data: bytes, out: np.ndarray, decode: Decoder, submit: Callable[..., Future],
                    workers: int) -> bool:
    """Fill ``out`` (uint8 ``[H, W, C]``, the whole image) with ``data`` decoded in parts,
    the first on this thread and the others through ``submit`` (an executor's); False when
    the image is too small or cannot be cut (``out`` untouched). A part's failure raises."""
    height, width = out.shape[:2]
    parts = min(workers, height * width // MIN_PART_PIXELS)
    if parts < 2:
        return False
    lay = layout(data)
    if lay is None or (lay.width, lay.height) != (width, height):
        return False
    pieces = plan(lay, parts)
    if pieces is None:
        return False
    futures = [submit(_decode_part, data, lay, piece, out, decode) for piece in pieces[1:]]
    try:
        _decode_part(data, lay, pieces[0], out, decode)
    finally:
        # parts no worker has started yet (the pool busy with other calls) run here
        late = [piece for piece, f in zip(pieces[1:], futures, strict=True) if f.cancel()]
        errors = [f.exception() for f in futures if not f.cancelled()]
    for error in errors:
        if error is not None:
            raise error
    for piece in late:
        _decode_part(data, lay, piece, out, decode)
    return True


def _decode_part(data: bytes, lay: Layout, part: Part, out: np.ndarray, decode: Decoder) -> None:
    top = part.first_row * lay.mcu_height
    shape = (part.height, *out.shape[1:])
    # below a cut with vertical context, the first row is both this part's and the one
    # above's: decoded apart, then only the rows this part owns are copied
    target = out[top : top + part.height] if part.keep_from == 0 else empty_output(shape,
                                                                                    np.uint8)
    pixels = decode(part_bytes(data, lay, part), target)
    if not (isinstance(pixels, np.ndarray) and pixels.shape == shape
            and pixels.__array_interface__["data"][0] == target.__array_interface__["data"][0]):
        raise ValueError(f"a JPEG part decoded to {getattr(pixels, 'shape', None)}, not {shape}")
    if part.keep_from:
        out[top + part.keep_from : top + part.height] = target[part.keep_from :]
