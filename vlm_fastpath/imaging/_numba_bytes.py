"""16-byte vector copies for the uint8 patch writes; numba, imported lazily (by
``_numba_patchify`` only).

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
