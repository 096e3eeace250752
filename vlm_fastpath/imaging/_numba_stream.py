"""Non-temporal (streaming) stores for the patch kernels' output; numba, imported lazily.

Why: a processor's output is tens to hundreds of MB written once and read later by someone
else (the host-to-device copy). Ordinary stores first read every cache line they write
("read for ownership") and fill the caches with lines nobody reads soon. On this 2-core
machine, writing 100 MB from a small L1-resident buffer took 12.6 ms on 2 threads with
ordinary stores and 1.6 ms with non-temporal ones (same run): the 2048² Qwen-VL output is
100 MB, so its writes, not its arithmetic, were the kernel's largest cost.

How: the kernels build a few patches in a small buffer (L1/L2), then :func:`stream_copy`
moves them out: whole aligned 64-byte lines by one vector store marked ``!nontemporal`` for
LLVM (``vmovntps``/``vmovntdq`` on x86, ``stnp`` on Arm), the unaligned head and tail by
ordinary stores. Streaming stores are weakly ordered, so every kernel that streams ends with
:func:`store_fence` before it returns (and so before any other thread is told it is done).
Below :data:`STREAM_MIN_BYTES` an output stays in the caches the ordinary way: there the next
reader may still find it there. Patches of 16 pixels in uint8 (Qwen3-VL, device-normalize)
skip the stage: :func:`stream_patch16` streams each output line from four patch lines, where
the output starts on a line (the output pool's arrays do: ``output_pool.ALIGN``); so do runs of
14-pixel patches (Qwen2-VL, Qwen2.5-VL) that fill whole lines: ``stream_pieces14`` streams 7
lines from 32 patch lines.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LINE = 64  # bytes per streamed store: one cache line
STREAM_MIN_BYTES = 4 << 20  # smaller outputs may still be cache-resident for their reader


def _line_copy(nontemporal: bool) -> object:
    """An intrinsic ``(dst, src)``: 64 bytes from address ``src`` (any alignment) to ``dst``
    by one vector load and one vector store, non-temporal (``dst`` 64-byte aligned) or
    ordinary (any alignment)."""

    @intrinsic
    def copy_line(typingctx, dst, src):  # noqa: ANN001, ANN202, ARG001
        sig = types.void(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            line = ir.VectorType(ir.IntType(8), LINE)
            src_ptr = builder.inttoptr(args[1], line.as_pointer())
            dst_ptr = builder.inttoptr(args[0], line.as_pointer())
            value = builder.load(src_ptr, align=1)
            store = builder.store(value, dst_ptr, align=LINE if nontemporal else 1)
            if nontemporal:
                store.set_metadata("nontemporal",
                                   builder.module.add_metadata([ir.IntType(32)(1)]))
            return context.get_dummy_value()

        return sig, codegen

    return copy_line


_stream_line = _line_copy(nontemporal=True)
# Why an ordinary copy by vectors too: the element loop below was not vectorized (numba's
# loop may alias), so an output under STREAM_MIN_BYTES moved one element per store: a Qwen
# video group's 3.4 MB of uint8 patches took 2.57 ms to copy out of the stage; by vectors
# 0.14 ms, streamed 0.12 ms (same run).
_plain_line = _line_copy(nontemporal=False)


@intrinsic
def stream_four_lines(typingctx, dst, src, stride):  # noqa: ANN001, ANN202, ARG001
    """64 bytes to address ``dst`` (64-byte aligned) by one non-temporal store: the 16 bytes
    at ``src``, at ``src + stride``, ``src + 2 * stride`` and ``src + 3 * stride``, in that
    order (any alignment). Why: four 16-pixel lines of a 16-pixel patch are one line of its
    output row, so the lines go straight from their rows to the output, with no stage."""
    sig = types.void(types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        to, frm, step = args
        i32 = ir.IntType(32)
        quarter = ir.VectorType(ir.IntType(8), LINE // 4)
        parts = []
        for k in range(4):
            at = builder.add(frm, builder.mul(step, ir.Constant(ir.IntType(64), k)))
            parts.append(builder.load(builder.inttoptr(at, quarter.as_pointer()), align=1))

        def joined(a, b, n):  # noqa: ANN001, ANN202
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, n),
                                                            [i32(k) for k in range(n)]))

        half = LINE // 2
        line = joined(joined(parts[0], parts[1], half), joined(parts[2], parts[3], half), LINE)
        store = builder.store(line, builder.inttoptr(
            to, ir.VectorType(ir.IntType(8), LINE).as_pointer()), align=LINE)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()

    return sig, codegen


def _piece_lines(piece: int) -> tuple[object, int, int]:
    """An intrinsic ``(dst, src, offsets)`` and its counts ``(pieces, lines)``: the bytes of
    ``pieces`` consecutive ``piece``-byte pieces, piece ``j`` the ``piece`` bytes at ``src +
    offsets[j]`` (``offsets``: the address of ``pieces`` int64 byte offsets), laid end to end
    as ``lines`` whole 64-byte lines from ``dst`` (64-byte aligned), each by one non-temporal
    store; ``pieces * piece == lines * 64``, the least such run. Each piece is read by one
    16-byte load (any alignment), so ``16 - piece`` bytes past every piece must be readable.

    Why: a 14-pixel patch line (Qwen2-VL, Qwen2.5-VL) is 14 bytes of uint8 output, so its
    output rows are runs of 14-byte pieces that are not on 16-byte boundaries, and a patch
    row of 2 patches (2352 bytes) ends mid-line. Staged, every byte is stored twice (the
    stage, then the stream) and the lines shared by two writes go out by ordinary stores.
    Here the pieces go from their rows straight into whole lines: all loads first (the
    streaming stores may alias them, for all LLVM knows), then each line is one two-source
    byte permute of the pieces it covers (``vpermt2b`` where AVX-512 VBMI is there)."""
    span = math.lcm(piece, LINE)
    pieces, lines = span // piece, span // LINE
    part = 16  # bytes per load
    assert piece <= part and -(-LINE // piece) + 1 <= 2 * LINE // part  # two sources a line

    @intrinsic
    def stream_pieces(typingctx, dst, src, offsets):  # noqa: ANN001, ANN202, ARG001
        sig = types.void(types.uint64, types.uint64, types.uint64)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            to, frm, table = args
            i32, i64 = ir.IntType(32), ir.IntType(64)
            loaded = ir.VectorType(ir.IntType(8), part)
            entries = builder.inttoptr(table, i64.as_pointer())
            parts = []
            for j in range(pieces):
                at = builder.add(frm, builder.load(builder.gep(entries, [i64(j)]), align=8))
                parts.append(builder.load(builder.inttoptr(at, loaded.as_pointer()), align=1))

            def joined(a, b):  # noqa: ANN001, ANN202
                n = 2 * a.type.count
                return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, n),
                                                                [i32(k) for k in range(n)]))

            def chunk(group):  # noqa: ANN001, ANN202
                # up to four loads as one 64-byte vector (the missing ones undefined)
                group = group + [ir.Constant(loaded, ir.Undefined)] * (4 - len(group))
                return joined(joined(group[0], group[1]), joined(group[2], group[3]))

            line_type = ir.VectorType(ir.IntType(8), LINE)
            for k in range(lines):
                first = k * LINE // piece
                last = (k * LINE + LINE - 1) // piece
                used = parts[first:last + 1]
                low = chunk(used[:4])
                high = chunk(used[4:]) if len(used) > 4 else ir.Constant(line_type, ir.Undefined)
                at = [k * LINE + b for b in range(LINE)]
                mask = [(a // piece - first) * part + a % piece for a in at]
                value = builder.shuffle_vector(low, high, ir.Constant(
                    ir.VectorType(i32, LINE), [i32(v) for v in mask]))
                out = builder.add(to, ir.Constant(i64, k * LINE))
                store = builder.store(value, builder.inttoptr(out, line_type.as_pointer()),
                                      align=LINE)
                store.set_metadata("nontemporal",
                                   builder.module.add_metadata([ir.IntType(32)(1)]))
            return context.get_dummy_value()

        return sig, codegen

    return stream_pieces, pieces, lines


# 14-pixel patches: 32 pieces of 14 bytes are 7 whole lines (448 bytes)
stream_pieces14, PIECES14, LINES14 = _piece_lines(14)


@intrinsic
def _fence(typingctx):  # noqa: ANN001, ANN202, ARG001
    """A full memory fence (``mfence`` on x86): orders the streaming stores before it."""
    sig = types.void()

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def store_fence() -> None:
    """Make this thread's streaming stores visible before it reports its work done."""
    _fence()


@njit(cache=True, nogil=True)
def stream_copy(dst, d, src, s, n, stream):  # noqa: ANN001, ANN201
    """``dst[d:d + n] = src[s:s + n]`` for 1-D C-contiguous arrays of one dtype, 64 bytes per
    vector store: streaming stores for the whole 64-byte lines of the destination when
    ``stream``, else ordinary ones; the head (streaming only: up to the first whole line) and
    the tail element by element. The caller checks the bounds (no wraparound, no checks
    here) and calls :func:`store_fence` before it returns."""
    item = dst.itemsize
    start = dst.ctypes.data + d * item
    head = min(n, ((LINE - start % LINE) % LINE) // item) if stream else 0
    for k in range(head):
        dst[d + k] = src[s + k]
    lines = (n - head) * item // LINE
    to = start + head * item
    frm = src.ctypes.data + (s + head) * item
    if stream:
        for k in range(lines):
            _stream_line(to + k * LINE, frm + k * LINE)
    else:
        for k in range(lines):
            _plain_line(to + k * LINE, frm + k * LINE)
    for k in range(head + lines * LINE // item, n):
        dst[d + k] = src[s + k]


@njit(cache=True, nogil=True, inline="always")
def stream_patch16(d, first, frame_bytes, frames, plane_bytes, row_bytes, t):  # noqa: ANN001, ANN201, PLR0913
    """One output row of a 16-pixel patch, ``[channel, slot, py, px]`` uint8 (``3 * t * 256``
    bytes, a whole number of lines, from the 64-byte aligned address ``d``), straight from
    channel planes by streaming stores: slot ``k`` of channel ``c`` is the 16x16 block at
    ``first + min(k, frames - 1) * frame_bytes + c * plane_bytes``, its rows ``row_bytes``
    apart. Measured against building the row in a stage and streaming the stage: a Qwen3-VL
    video group's patch writes (2 frames, 1152x640) 0.70 -> 0.18 ms on one thread."""
    line = np.uint64(LINE)
    four_rows = np.uint64(row_bytes) * np.uint64(4)
    for c in range(3):
        for k in range(t):
            s = np.uint64(first + min(k, frames - 1) * frame_bytes + c * plane_bytes)
            for _ in range(4):
                stream_four_lines(d, s, np.uint64(row_bytes))
                d += line
                s += four_rows
    return d
