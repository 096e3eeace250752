"""The int16 horizontal pass by AVX-512 byte permutes; numba, imported lazily (by
``_numba_int16_taps`` only). Why, and the table it reads: ``byte_gather``.

How: ``gather_block16`` computes 16 output bytes of one channel of one row. It loads the
block's 128-byte window, and per step one ``vpermi2b`` places two taps' bytes of the 16
outputs in the low bytes of 32 16-bit lanes (the high bytes masked to zero), and one pairwise
multiply-add (``vpmaddwd``, ``vpdpwssd`` with VNNI) adds both products to each output's int32
sum. ``gather_block8`` does the same for 8 outputs whose lanes 8-15 hold the other tap pairs,
and adds the two halves before the shift. The sums are the same integers as the
column-major pass's (every product and partial sum fits int32), so the same bytes. The
permute is emitted only where ``byte_gather.cpu_has_permutes()`` said the compile target has
it; elsewhere the intrinsic compiles to a trap that no caller reaches (every table is empty
there). A row is read left
to right, its blocks' windows two rows ahead prefetched: measured on 32 1280x720 frames to
1152 wide, one thread, same run, the horizontal pass took 23.8 ms without the prefetch and
18.8 ms with it (29.1 ms column-major).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._numba_tap_pairs import _I32, _I64, _V32, _lanes, _madd_pairs, _splat
from .byte_gather import HEADER, cpu_has_permutes

_I8 = ir.IntType(8)
_V8 = ir.VectorType(_I8, 64)
_PERMUTE = "llvm.x86.avx512.vpermi2var.qi.512"
AHEAD = 2  # rows between the one computed and the one prefetched
ENABLED = cpu_has_permutes()  # frozen into the kernels when they compile


def _gather_codegen(builder: ir.IRBuilder, dst: ir.Value, src: ir.Value, table: ir.Value,
                    steps: ir.Value, half: ir.Value, shift: ir.Value, outputs: int) -> None:
    permute = builder.module.declare_intrinsic(
        _PERMUTE, fnty=ir.FunctionType(_V8, [_V8, _V8, _V8]))
    low = builder.load(builder.inttoptr(src, _V8.as_pointer()), align=1)
    high = builder.load(builder.inttoptr(builder.add(src, _I64(64)), _V8.as_pointer()), align=1)
    start = _splat(builder, half)
    if outputs == 8:  # the rounding term once per pixel: lanes 8-15 are added to 0-7 at the end
        start = builder.shuffle_vector(start, ir.Constant(_V32, [0] * 16),
                                       ir.Constant(_V32, [*range(8), *range(16, 24)]))
    entry = builder.block
    loop = builder.function.append_basic_block("gather_loop")
    done = builder.function.append_basic_block("gather_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    j = builder.phi(_I64)
    acc = builder.phi(_V32)
    j.add_incoming(_I64(0), entry)
    acc.add_incoming(start, entry)
    index_at = builder.add(table, builder.mul(builder.add(j, _I64(HEADER)), _I64(64)))
    weight_at = builder.add(index_at, builder.mul(steps, _I64(64)))
    index = builder.load(builder.inttoptr(index_at, _V8.as_pointer()), align=1)
    weights = builder.load(builder.inttoptr(weight_at, _V32.as_pointer()), align=1)
    picked = builder.bitcast(builder.call(permute, [low, index, high]), _V32)
    samples = builder.and_(picked, _lanes(0x00FF00FF))
    total = _madd_pairs(builder, acc, samples, weights)
    following = builder.add(j, _I64(1))
    body_end = builder.block
    j.add_incoming(following, body_end)
    acc.add_incoming(total, body_end)
    builder.cbranch(builder.icmp_signed("<", following, steps), loop, done)
    builder.position_at_end(done)
    vector = _V32
    if outputs == 8:
        vector = ir.VectorType(_I32, 8)
        undef = ir.Constant(_V32, ir.Undefined)
        halves = [builder.shuffle_vector(total, undef, ir.Constant(vector, list(lanes)))
                  for lanes in (range(8), range(8, 16))]
        total = builder.add(*halves)
    zero, top = ir.Constant(vector, [0] * outputs), ir.Constant(vector, [255] * outputs)
    amount = builder.shuffle_vector(builder.insert_element(ir.Constant(vector, ir.Undefined),
                                                           shift, _I32(0)),
                                    ir.Constant(vector, ir.Undefined),
                                    ir.Constant(vector, [0] * outputs))
    v = builder.ashr(total, amount)
    v = builder.select(builder.icmp_signed("<", v, zero), zero, v)
    v = builder.select(builder.icmp_signed(">", v, top), top, v)
    out = ir.VectorType(_I8, outputs)
    builder.store(builder.trunc(v, out), builder.inttoptr(dst, out.as_pointer()), align=1)


def _gather_intrinsic(outputs: int):  # noqa: ANN202
    def typer(typingctx, dst, src, table, steps, half, shift):  # noqa: ANN001, ANN202, ARG001
        sig = types.void(types.uint64, types.uint64, types.uint64, types.int64, types.int32,
                         types.int32)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            if ENABLED:
                _gather_codegen(builder, *args, outputs)
            else:
                trap = builder.module.declare_intrinsic("llvm.trap", fnty=ir.FunctionType(
                    ir.VoidType(), []))
                builder.call(trap, [])
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = f"gather_block{outputs}"
    return intrinsic(typer)


# ``outputs`` bytes at ``dst`` from the 128-byte window at ``src``, with the ``steps`` of the
# block's table rows at ``table`` (``byte_gather.gather_table``), the sums from ``half``
# shifted by ``shift`` and clamped.
gather_block16 = _gather_intrinsic(16)
gather_block8 = _gather_intrinsic(8)


@intrinsic
def prefetch(typingctx, address):  # noqa: ANN001, ANN202, ARG001
    """A read prefetch of the cache line at ``address`` into every level."""
    sig = types.void(types.uint64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        ptr = ir.PointerType(_I8)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [ptr], fnty=ir.FunctionType(
            ir.VoidType(), [ptr, _I32, _I32, _I32]))
        builder.call(fn, [builder.inttoptr(args[0], ptr), _I32(0), _I32(3), _I32(1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _header(table, b, k):  # noqa: ANN001, ANN202
    """The little-endian int32 ``k`` of block ``b``'s header row."""
    o = 4 * k
    return (np.int64(table[b, 0, o]) | (np.int64(table[b, 0, o + 1]) << 8)
            | (np.int64(table[b, 0, o + 2]) << 16) | (np.int64(table[b, 0, o + 3]) << 24))


@njit(cache=True, nogil=True)
def table_fits(table, src, planes):  # noqa: ANN001, ANN201
    """True when ``table`` has blocks and was made for rows as long as ``src``'s and for
    planes as wide as ``planes`` (its last block ends at their end), three of them, both
    arrays' bytes contiguous along a row."""
    last = table.shape[0] - 1
    return (table.shape[0] > 0 and src.strides[1] == 1 and planes.strides[2] == 1
            and planes.shape[0] >= 3 and _header(table, 0, 2) == src.shape[1]
            and _header(table, last, 1) + _header(table, last, 3) == planes.shape[2])


@njit(cache=True, nogil=True)
def gather_rows(src, first, count, table, shift, planes, slots):  # noqa: ANN001, ANN201, PLR0913
    """Rows ``first .. first+count`` of ``src`` (uint8 ``[H, W*cs]``, C-contiguous rows)
    through the horizontal pass into channel planes ``planes`` (uint8 ``[3, slots, ow]``,
    row ``r`` in slot ``r % slots``), with the table of ``byte_gather.gather_table``
    (:func:`table_fits` them)."""
    steps = (table.shape[1] - HEADER) // 2
    outputs = _header(table, 0, 3)
    half = np.int32(1 << (shift - 1))
    sh = np.int32(shift)
    src_base = np.uint64(src.ctypes.data)
    src_stride = np.uint64(src.strides[0])
    out_base = np.uint64(planes.ctypes.data)
    plane_stride = np.uint64(planes.strides[0])
    slot_stride = np.uint64(planes.strides[1])
    table_base = np.uint64(table.ctypes.data)
    block_bytes = np.uint64(table.strides[0])
    blocks = table.shape[0]
    windows = np.empty(blocks, np.uint64)
    starts = np.empty(blocks, np.uint64)
    for b in range(blocks):
        windows[b] = np.uint64(_header(table, b, 0))
        starts[b] = np.uint64(_header(table, b, 1))
    slot = first % slots  # counted up, not divided per row
    # row by row: each source row is read left to right (the prefetchers follow it), the
    # table stays in cache
    for r in range(first, first + count):
        row = src_base + np.uint64(r) * src_stride
        out_row = out_base + np.uint64(slot) * slot_stride
        ahead = row + np.uint64(AHEAD) * src_stride
        for b in range(blocks):
            rows = table_base + np.uint64(b) * block_bytes
            if r + AHEAD < src.shape[0]:
                prefetch(ahead + windows[b])
                prefetch(ahead + windows[b] + np.uint64(64))
            for c in range(3):
                dst = out_row + np.uint64(c) * plane_stride + starts[b]
                at = row + windows[b] + np.uint64(c)
                if outputs == 16:
                    gather_block16(dst, at, rows, steps, half, sh)
                else:
                    gather_block8(dst, at, rows, steps, half, sh)
        slot += 1
        if slot == slots:
            slot = 0
