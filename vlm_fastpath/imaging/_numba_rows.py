"""Rows of a Pillow image copied by GIL-free kernels, through its row table; numba, imported
lazily.

Why: an RGB image larger than one Pillow block (a phone photo) cannot be read in place as one
array, so its rows are copied out, a strip at a time (the resampler's bands) or whole (the
Qwen-VL kernels). Pillow's ``paste`` copies them in C, but each strip is a Python call that
takes the GIL back when it returns, which beside a thread running Python waits up to 5 ms.
How: :func:`.pillow_pixels.row_table` gives the address of every row; here a kernel copies
rows from those addresses, inside the job loops (``job_loop``) that also resample them. The
typed pointers from int64 addresses (``bytes_at`` ...) also let a loop over a call's frames
read each frame's arrays from a table of addresses (``numba.carray``), where one argument
per array cannot serve a varying number of frames.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from vlm_fastpath.imaging._numba_jobs import claim, finish, settle


def _typed_pointer(item: types.Type) -> object:
    """An intrinsic ``(address)``: the int64 ``address`` as a pointer to ``item``."""

    @intrinsic
    def pointer(typingctx, address):  # noqa: ANN001, ANN202, ARG001
        sig = types.CPointer(item)(types.int64)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        return sig, codegen

    return pointer


bytes_at = _typed_pointer(types.uint8)
int32_at = _typed_pointer(types.int32)
int64_at = _typed_pointer(types.int64)


@intrinsic
def items_at(typingctx, address, like):  # noqa: ANN001, ANN202, ARG001
    """The int64 ``address`` as a pointer to items of ``like``'s dtype (an array)."""
    sig = types.CPointer(like.dtype)(types.int64, like)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def _copy_bytes(typingctx, dst, src, count):  # noqa: ANN001, ANN202, ARG001
    """``memcpy(dst, src, count)`` between int64 addresses (libc's, through LLVM)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        byte = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(args[0], byte),
                           builder.inttoptr(args[1], byte), args[2], 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def gather_rows(rows, top, bottom, dst):  # noqa: ANN001, ANN201
    """Rows ``top .. bottom`` (addresses in ``rows``, ``dst.shape[1]`` bytes each) into
    ``dst[0 .. bottom - top]`` (C-contiguous rows)."""
    width = dst.shape[1]
    base = dst.ctypes.data
    stride = dst.strides[0]
    for y in range(top, bottom):
        _copy_bytes(base + (y - top) * stride, rows[y], width)


@njit(cache=True, nogil=True)
def gather_row_jobs(counters, edges, rows, dst, wait):  # noqa: ANN001, ANN201
    """:func:`gather_rows` of ``edges[j] .. edges[j + 1]`` into the same rows of ``dst``,
    for each job ``j`` this thread claims (``_numba_jobs``)."""
    jobs = edges.shape[0] - 1
    job = claim(counters, jobs)
    while job >= 0:
        gather_rows(rows, edges[job], edges[job + 1], dst[edges[job]:edges[job + 1]])
        finish(counters)
        job = claim(counters, jobs)
    return settle(counters, jobs, wait)
