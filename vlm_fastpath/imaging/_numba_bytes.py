"""Byte moves written as LLVM vector instructions: 16-byte copies for the uint8 patch writes,
8x8 transposes for the resampler's column-major blocks (:func:`transpose8`); numba, imported
lazily (by the kernel modules only).

Why: with rescale and normalize off (vLLM 0.32+ normalizes Qwen-VL pixels on the device, so it
asks for uint8) the patch table is the identity, and every output byte is a source byte. The
table kernel moves them one at a time (a load, a table load and a store per byte: 2044² took
as long in uint8 as in float32, which writes 4x the bytes). Here one patch line (``p`` bytes
of one channel) moves as one 16-byte vector: from a channel plane as is; from interleaved RGB
or RGBX pixels through one shuffle of 48 or 64 loaded bytes that keeps every 3rd or 4th.
numba runs no SLP vectorizer and a loop of 14 iterations is too short for its loop vectorizer,
so the vectors are written out as LLVM instructions.

The callers own the bounds: each copy reads 16 samples (``16 * stride`` bytes) from ``src``
and writes 16 bytes at ``dst``, both raw addresses; a line shorter than 16 bytes overruns its
destination, which the next line (written at a higher address) overwrites.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

VECTOR = 16  # bytes per copy


def _gather(stride: int, offset: int) -> object:
    """An intrinsic ``(dst, src)``: bytes ``src[offset + stride * i]`` for ``i < 16`` to
    ``dst[i]`` (unaligned loads and store)."""

    @intrinsic
    def gather(typingctx, dst, src):  # noqa: ANN001, ANN202, ARG001
        sig = types.void(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            loaded = ir.VectorType(ir.IntType(8), VECTOR * stride)
            value = builder.load(builder.inttoptr(args[1], loaded.as_pointer()), align=1)
            if stride > 1:
                mask = ir.Constant(ir.VectorType(ir.IntType(32), VECTOR),
                                   [offset + stride * i for i in range(VECTOR)])
                value = builder.shuffle_vector(value, ir.Constant(loaded, ir.Undefined), mask)
            kept = ir.VectorType(ir.IntType(8), VECTOR)
            builder.store(value, builder.inttoptr(args[0], kept.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return gather


copy16 = _gather(1, 0)
# one per channel of interleaved RGB (3 bytes a pixel) and Pillow's RGBX (4)
rgb16_0, rgb16_1, rgb16_2 = (_gather(3, c) for c in range(3))
rgbx16_0, rgbx16_1, rgbx16_2 = (_gather(4, c) for c in range(3))


def _const_mask(indices: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(ir.IntType(32), len(indices)), indices)


_BYTES_PAIRED = _const_mask([k // 2 + 8 * (k % 2) for k in range(16)])
_HALVES_LOW = _const_mask([0, 8, 1, 9, 2, 10, 3, 11])
_HALVES_HIGH = _const_mask([4, 12, 5, 13, 6, 14, 7, 15])
_WORDS_LOW = _const_mask([0, 4, 1, 5])
_WORDS_HIGH = _const_mask([2, 6, 3, 7])


@intrinsic
def transpose8(typingctx, s0, s1, s2, s3, s4, s5, s6, s7, d0, d1, d2, d3, d4, d5, d6, d7):  # noqa: ANN001, ANN202, ARG001, PLR0913
    """An 8x8 byte transpose between raw addresses: byte ``k`` of the 8 bytes at ``s<r>``
    becomes byte ``r`` of the 8 bytes at ``d<k>`` (unaligned loads and stores).

    Why: the resampler's horizontal pass turns blocks of rows column-major and back, one
    64-bit word per column of eight rows (``_numba_resample``). Built a byte at a time
    (eight loads and shifts, or shifts and stores, per word), those two transposes took 1.15
    of a 1280x720 frame's 1.8 ms horizontal pass. Here eight words move in twelve shuffles
    (interleaving bytes, then 16-bit pairs, then 32-bit quads: LLVM's ``punpck*``).
    Destinations may repeat (a discarded row): the stores are in ``d0 .. d7`` order."""
    sig = types.void(*([types.uint64] * 16))

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        i64 = ir.IntType(64)
        bytes8 = ir.VectorType(ir.IntType(8), 8)
        rows = [builder.bitcast(builder.load(builder.inttoptr(a, i64.as_pointer()), align=1),
                                bytes8) for a in args[:8]]
        outs = _transpose8_words(builder, rows)
        for value, address in zip(outs, args[8:], strict=True):
            builder.store(value, builder.inttoptr(address, i64.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


WIDE_GROUPS = 4  # 8-row groups per wide transpose (32 rows: a 32-byte store per column)
_WORD = ir.IntType(64)
_BYTES8 = ir.VectorType(ir.IntType(8), 8)
_COLUMN = ir.VectorType(_WORD, WIDE_GROUPS)  # one column's bytes of 32 rows


def _strided(builder: ir.IRBuilder, base: ir.Value, step: ir.Value, k: int,
             kind: ir.Type) -> ir.Value:
    """A pointer to a ``kind`` at raw address ``base + k * step``."""
    address = builder.add(base, builder.mul(step, ir.Constant(_WORD, k)))
    return builder.inttoptr(address, kind.as_pointer())


def _transpose8_words(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 8x8 network of :func:`transpose8` on eight loaded ``<8 x i8>`` rows: column
    ``k``'s eight bytes (one per row) as the ``k``-th i64."""
    halves = ir.VectorType(ir.IntType(16), 8)
    quads = ir.VectorType(ir.IntType(32), 4)
    words = ir.VectorType(ir.IntType(64), 2)
    pairs = [builder.bitcast(builder.shuffle_vector(rows[2 * i], rows[2 * i + 1],
                                                    _BYTES_PAIRED), halves) for i in range(4)]
    top_left, top_right, bottom_left, bottom_right = (
        builder.bitcast(builder.shuffle_vector(pairs[a], pairs[a + 1], mask), quads)
        for a in (0, 2) for mask in (_HALVES_LOW, _HALVES_HIGH))
    outs = []
    for first, second in ((top_left, bottom_left), (top_right, bottom_right)):
        for mask in (_WORDS_LOW, _WORDS_HIGH):
            both = builder.bitcast(builder.shuffle_vector(first, second, mask), words)
            outs.append(builder.extract_element(both, ir.Constant(ir.IntType(32), 0)))
            outs.append(builder.extract_element(both, ir.Constant(ir.IntType(32), 1)))
    return outs


def _rows_to_columns(kept: tuple[int, ...]) -> object:
    """An intrinsic ``(src, row_bytes, dst, column_bytes)``: the 8 bytes at ``src + r *
    row_bytes`` for ``r < 8 * WIDE_GROUPS`` (rows of equal stride), transposed; byte column
    ``kept[i]`` (its ``8 * WIDE_GROUPS`` bytes, one per row) stored at ``dst + i *
    column_bytes``, the other columns dropped (an RGBX pair's X bytes)."""

    @intrinsic
    def rows_to_columns(typingctx, src, row_bytes, dst, column_bytes):  # noqa: ANN001, ANN202, ARG001
        sig = types.void(types.uint64, types.uint64, types.uint64, types.uint64)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            base, row_bytes, dst, column_bytes = args
            rows = [builder.bitcast(builder.load(_strided(builder, base, row_bytes, r, _WORD),
                                                 align=1), _BYTES8)
                    for r in range(8 * WIDE_GROUPS)]
            networks = [_transpose8_words(builder, rows[8 * n:8 * n + 8])
                        for n in range(WIDE_GROUPS)]
            for i, k in enumerate(kept):
                value = ir.Constant(_COLUMN, ir.Undefined)
                for n in range(WIDE_GROUPS):
                    value = builder.insert_element(value, networks[n][k],
                                                   ir.Constant(ir.IntType(32), n))
                builder.store(value, _strided(builder, dst, column_bytes, i, _COLUMN), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return rows_to_columns


# 32 rows of 8 interleaved RGB bytes into 8 columns; of 2 RGBX pixels into their 6 colours
rgb_rows_to_columns = _rows_to_columns(tuple(range(8)))
rgbx_rows_to_columns = _rows_to_columns((0, 1, 2, 4, 5, 6))


@intrinsic
def columns_to_rows(typingctx, src, column_bytes, rows, offset):  # noqa: ANN001, ANN202, ARG001
    """The inverse of :func:`rgb_rows_to_columns`: 8 columns of ``8 * WIDE_GROUPS`` bytes
    (column ``k`` at ``src + k * column_bytes``) into rows, byte ``k`` of the 8 bytes at
    ``rows[r] + offset`` from column ``k``'s byte ``r``; ``rows`` is the address of
    ``8 * WIDE_GROUPS`` row addresses (uint64), which may repeat (a discarded padding row):
    the stores are in row order. One 32-byte load per column where :func:`transpose8` makes
    four 8-byte ones."""
    sig = types.void(types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        base, column_bytes, rows, offset = args
        columns = [builder.load(_strided(builder, base, column_bytes, k, _COLUMN), align=1)
                   for k in range(8)]
        table = builder.inttoptr(rows, _WORD.as_pointer())
        for n in range(WIDE_GROUPS):
            words = [builder.bitcast(builder.extract_element(c, ir.Constant(ir.IntType(32), n)),
                                     _BYTES8) for c in columns]
            for r, value in enumerate(_transpose8_words(builder, words)):
                row = builder.load(builder.gep(table, [ir.Constant(_WORD, 8 * n + r)]))
                builder.store(value, builder.inttoptr(builder.add(row, offset),
                                                      _WORD.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen
