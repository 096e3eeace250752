"""32-bit integer steps for the resize kernels' weighted sums; numba, imported lazily.

Why: numba types every integer operation on int32 values as int64 (its rule for integers
narrower than a machine word), so a loop of ``acc[j] += w * np.int32(line[j])`` compiles to
64-bit lanes with ``vpmullq`` (slow on every x86 core): half the lanes of int32 and several
times the cost per multiply. Pillow's and torch's resamplers sum in 32-bit ints; these steps
do exactly that, as LLVM instructions numba cannot widen. Measured on one 64-row block of the
horizontal pass, 2048 -> 2044 (5 taps), same run: 104 -> 80 us, and 4032 -> 1200 (14 taps)
138 -> 72 us, together with summing four taps per pass over the accumulators.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_I32 = ir.IntType(32)


@intrinsic
def mad32(typingctx, acc, weight, sample):  # noqa: ANN001, ANN202, ARG001
    """``acc + weight * sample`` in int32 (``sample`` a uint8, zero-extended)."""
    sig = types.int32(types.int32, types.int32, types.uint8)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        total, w, s = args
        return builder.add(total, builder.mul(w, builder.zext(s, _I32)))

    return sig, codegen


@intrinsic
def shift_to_byte(typingctx, value, shift):  # noqa: ANN001, ANN202, ARG001
    """``value >> shift`` (arithmetic, int32) clamped to 0..255, as a uint8: the last step of
    Pillow's and torch's 8-bit passes."""
    sig = types.uint8(types.int32, types.int32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        v = builder.ashr(args[0], args[1])
        v = builder.select(builder.icmp_signed("<", v, _I32(0)), _I32(0), v)
        v = builder.select(builder.icmp_signed(">", v, _I32(255)), _I32(255), v)
        return builder.trunc(v, ir.IntType(8))

    return sig, codegen
