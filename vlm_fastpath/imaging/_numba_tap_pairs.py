"""Two int16 taps per multiply for the horizontal pass's long windows; numba, imported lazily
(by ``_numba_int16_taps`` only).

Why: one tap of the column-major pass (``_numba_int16_taps``) widens each byte to a 32-bit
lane (``vpmovzxbd``, a shuffle) and multiplies it by a sign-extended int16 weight
(``vpdpwssd``/``vpmaddwd`` with one half of each pair zero), so half of every multiply is
wasted and the shuffle port is the limit. Here two taps share each 32-bit lane: the bytes of
columns ``k`` and ``k + 1`` are unpacked into the low and high 16 bits with shifts and masks
(ALU ports, no shuffle), and one pairwise multiply-add weighs both. Measured on 64-row blocks,
one thread, same run: 3840 -> 1036 (15 taps) 3.85 -> 2.59 ms a frame, 1920 -> 1288 (6 taps)
1.66 -> 1.51 ms; 5 taps unchanged (2.34 / 2.35 ms, so shorter windows keep the old sweeps).
The vertical pass's windows of more than 8 taps (8 and fewer keep their sums in registers)
take the same step over rows (:func:`vertical_paired`): 2160 -> 588 rows, 0.94-1.02 -> 0.80 ms
a frame's three planes.

How: one call handles one output column's 64 rows (a 64-byte run of each tap's column). Lane
``i`` of the four accumulators holds rows ``4i``, ``4i + 1``, ``4i + 2``, ``4i + 3`` (byte
``c`` of each 32-bit load), so every tap lands in the same lane order and the last step packs
the four clamped sums back into bytes in row order. The sums are the same int32 integers as
the one-tap sweeps' (each product and partial sum fits int32), so the same bytes.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_LANES = 16  # 32-bit lanes in one 64-byte run
_V32 = ir.VectorType(_I32, _LANES)
RUN = 4 * _LANES  # bytes (rows) per call


def _splat(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    one = builder.insert_element(ir.Constant(_V32, ir.Undefined), value, _I32(0))
    return builder.shuffle_vector(one, ir.Constant(_V32, ir.Undefined),
                                  ir.Constant(_V32, [0] * _LANES))


def _lanes(value: int) -> ir.Constant:
    return ir.Constant(_V32, [value] * _LANES)


def _madd_pairs(builder: ir.IRBuilder, acc: ir.Value, x: ir.Value, w: ir.Value) -> ir.Value:
    """``acc + lo16(x)*lo16(w) + hi16(x)*hi16(w)`` per lane, signed 16-bit halves: the
    pattern LLVM lowers to ``vpmaddwd`` (``vpdpwssd`` with VNNI)."""
    halves = ir.VectorType(_I16, 2 * _LANES)
    wide = ir.VectorType(_I32, 2 * _LANES)
    products = builder.mul(builder.sext(builder.bitcast(x, halves), wide),
                           builder.sext(builder.bitcast(w, halves), wide))
    undef = ir.Constant(wide, ir.Undefined)
    even = builder.shuffle_vector(products, undef, ir.Constant(_V32, list(range(0, 2 * _LANES, 2))))
    odd = builder.shuffle_vector(products, undef, ir.Constant(_V32, list(range(1, 2 * _LANES, 2))))
    return builder.add(acc, builder.add(even, odd))


def _pair_lanes(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> list[ir.Value]:
    """Byte ``c`` of each lane of ``a`` (low half) and of ``b`` (high half), for c = 0..3."""
    low, high = _lanes(0xFF), _lanes(0xFF0000)
    return [
        builder.or_(builder.and_(a, low), builder.and_(builder.shl(b, _lanes(16)), high)),
        builder.or_(builder.and_(builder.lshr(a, _lanes(8)), low),
                    builder.and_(builder.shl(b, _lanes(8)), high)),
        builder.or_(builder.and_(builder.lshr(a, _lanes(16)), low), builder.and_(b, high)),
        builder.or_(builder.lshr(a, _lanes(24)), builder.and_(builder.lshr(b, _lanes(8)), high)),
    ]


def _paired_codegen(builder: ir.IRBuilder, tap_address: object, pairs: ir.Value,
                    npairs: ir.Value, half: ir.Value, shift: ir.Value, dst: ir.Value) -> None:
    """The loop over ``npairs`` tap pairs (``tap_address(builder, k)``: the 64 bytes of tap
    ``k``, an i64 value; weights ``pairs[i]``), then the shift, clamp and packed store."""
    entry = builder.block
    loop = builder.function.append_basic_block("pairs_loop")
    done = builder.function.append_basic_block("pairs_done")
    start = _splat(builder, half)
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(_I64)
    accs = [builder.phi(_V32) for _ in range(4)]
    i.add_incoming(_I64(0), entry)
    for acc in accs:
        acc.add_incoming(start, entry)
    even = builder.mul(i, _I64(2))
    a = builder.load(builder.inttoptr(tap_address(builder, even), _V32.as_pointer()), align=1)
    b = builder.load(builder.inttoptr(tap_address(builder, builder.add(even, _I64(1))),
                                      _V32.as_pointer()), align=1)
    weight = builder.load(builder.inttoptr(builder.add(pairs, builder.mul(i, _I64(4))),
                                           _I32.as_pointer()), align=4)
    w = _splat(builder, weight)
    sums = [_madd_pairs(builder, acc, x, w)
            for acc, x in zip(accs, _pair_lanes(builder, a, b), strict=True)]
    following = builder.add(i, _I64(1))
    body_end = builder.block
    i.add_incoming(following, body_end)
    for acc, total in zip(accs, sums, strict=True):
        acc.add_incoming(total, body_end)
    builder.cbranch(builder.icmp_signed("<", following, npairs), loop, done)
    builder.position_at_end(done)
    amount = _splat(builder, shift)
    packed = None
    for c, total in enumerate(sums):
        v = builder.ashr(total, amount)
        v = builder.select(builder.icmp_signed("<", v, _lanes(0)), _lanes(0), v)
        v = builder.select(builder.icmp_signed(">", v, _lanes(255)), _lanes(255), v)
        if c:
            v = builder.shl(v, _lanes(8 * c))
        packed = v if packed is None else builder.or_(packed, v)
    builder.store(packed, builder.inttoptr(dst, _V32.as_pointer()), align=1)


@intrinsic
def paired_run(typingctx, dst, src, span, pairs, npairs, last, half, shift):  # noqa: ANN001, ANN202, ARG001, PLR0913
    """One output column's 64 rows: tap ``k``'s bytes at ``src + k * span`` (``k * span``
    clamped to ``last``: an odd window's missing tap re-reads the last one, weighed 0),
    weights ``pairs[i]`` (int32: tap ``2i`` in the low 16 bits, ``2i + 1`` in the high),
    ``npairs >= 1`` of them, the sums from ``half``, shifted and clamped into 64 bytes at
    ``dst``."""
    sig = types.void(types.uint64, types.uint64, types.uint64, types.uint64, types.int64,
                     types.uint64, types.int32, types.int32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        dst, src, span, pairs, npairs, last, half, shift = args

        def tap_address(builder: ir.IRBuilder, k: ir.Value) -> ir.Value:
            offset = builder.mul(k, span)
            offset = builder.select(builder.icmp_unsigned(">", offset, last), last, offset)
            return builder.add(src, offset)

        _paired_codegen(builder, tap_address, pairs, npairs, half, shift, dst)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def paired_ring(typingctx, dst, base, stride, slot, ring, last, offset, pairs, npairs, half,  # noqa: ANN001, ANN202, ARG001, PLR0913
                shift):
    """:func:`paired_run` for the vertical pass over a ring of lines: tap ``k``'s 64 bytes at
    ``base + s * stride + offset``, ``s`` the slot ``slot + min(k, last)`` wrapped once at
    ``ring`` (``slot < ring``, ``last < ring``; an odd window's missing tap re-reads line
    ``last``, weighed 0)."""
    sig = types.void(types.uint64, types.uint64, types.uint64, types.uint64, types.uint64,
                     types.uint64, types.uint64, types.uint64, types.int64, types.int32,
                     types.int32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        dst, base, stride, slot, ring, last, offset, pairs, npairs, half, shift = args

        def tap_address(builder: ir.IRBuilder, k: ir.Value) -> ir.Value:
            k = builder.select(builder.icmp_unsigned(">", k, last), last, k)
            s = builder.add(slot, k)
            s = builder.select(builder.icmp_unsigned(">=", s, ring), builder.sub(s, ring), s)
            return builder.add(builder.add(base, builder.mul(s, stride)), offset)

        _paired_codegen(builder, tap_address, pairs, npairs, half, shift, dst)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def vertical_paired(lines, first, count, pairs, ring, dst, shift):  # noqa: ANN001, ANN201, PLR0913
    """One output row of the vertical pass (``_numba_int16_taps.vertical_row``'s arguments:
    a ring of ``ring`` >= ``count`` slots, contiguous lines, ``dst`` contiguous and at least
    :data:`RUN` long), two taps per multiply with the row's ``pairs``
    (``torch_taps.tap_pairs``): whole 64-byte runs, then one last run ending at the row's
    end (it recomputes a few bytes, the same ones)."""
    npairs = (count + 1) // 2
    n = dst.shape[0]
    out = np.uint64(dst.ctypes.data)
    base = np.uint64(lines.ctypes.data)
    stride = np.uint64(lines.strides[0])
    slot = np.uint64(first % ring)
    weights = np.uint64(pairs.ctypes.data)
    half = np.int32(1 << (shift - 1))
    sh = np.int32(shift)
    o = 0
    while o < n:
        o = min(o, n - RUN)
        paired_ring(out + np.uint64(o), base, stride, slot, np.uint64(ring),
                    np.uint64(count - 1), np.uint64(o), weights, npairs, half, sh)
        o += RUN


@njit(cache=True, nogil=True)
def columns_paired(cols, span, xmin, pairs, taps, half, sh, out):  # noqa: ANN001, ANN201, PLR0913
    """The horizontal pass on column-major bytes (``_numba_int16_taps.horizontal_columns``'
    layout, ``span`` a multiple of :data:`RUN`) of ``taps``-long windows, two taps per
    multiply with their ``pairs`` (``torch_taps.tap_pairs``, one row per output column)."""
    npairs = (taps + 1) // 2
    base = np.uint64(cols.ctypes.data)
    out_base = np.uint64(out.ctypes.data)
    weights = np.uint64(pairs.ctypes.data)
    pair_bytes = np.uint64(pairs.strides[0])
    last = np.uint64(taps - 1) * span
    run = np.uint64(RUN)
    for xi in range(xmin.shape[0]):
        x = np.uint64(xi)
        column = base + np.uint64(xmin[x]) * span
        for r in range(span // run):
            o = np.uint64(r) * run
            paired_run(out_base + x * span + o, column + o, span, weights + x * pair_bytes,
                       npairs, last, half, sh)
