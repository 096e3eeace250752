"""A shared job counter for GIL-free job loops; numba, imported lazily by the kernels.

Why: a pool thread that runs one job per Python call takes the GIL back after every job. Beside
a thread that runs Python (an API server's event loop under load), each takeback waits up to
the interpreter's switch interval (5 ms), so a call of a dozen short jobs could take six times
its quiet time (``benchmarks/results/decode.md``). Inside one ``nogil`` call a thread takes the
next job from an atomic counter instead: one GIL release and one takeback per thread per call.

How: ``counters`` is an int64 array of ``job_loop.SLOTS``: the next job to claim, the jobs
done, and a failure flag that the Python side sets when a thread's call raised. A thread claims
jobs by an atomic fetch-and-add until none is left; the caller's thread then waits, still
without the GIL, until every claimed job is done (:func:`wait_done`), yielding its core to the
threads that run them. A helper that starts late finds nothing to claim (``job_loop`` does not
even hand it the call's arrays once the call has ended).
"""

from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from vlm_fastpath.imaging._numba_stream import store_fence
from vlm_fastpath.imaging.job_loop import DONE, FAILED, NEXT

_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@intrinsic
def _fetch_add(typingctx, counters, index, value):  # noqa: ANN001, ANN202, ARG001
    """``counters[index] += value`` as one sequentially consistent atomic; returns the old
    value."""
    sig = types.int64(counters, types.intp, types.int64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def claim(counters, jobs):  # noqa: ANN001, ANN201
    """The next unclaimed job below ``jobs``, or -1 when none is left or a thread failed."""
    if _fetch_add(counters, FAILED, 0) != 0:
        return -1
    job = _fetch_add(counters, NEXT, 1)
    return job if job < jobs else -1


@njit(cache=True, nogil=True, inline="always")
def finish(counters) -> None:  # noqa: ANN001
    """Count one claimed job done, its streaming stores fenced first (the thread that sees
    the count reads them)."""
    store_fence()
    _fetch_add(counters, DONE, 1)


@njit(cache=True, nogil=True)
def wait_done(counters, jobs):  # noqa: ANN001, ANN201
    """Wait until all ``jobs`` are done or a thread failed; True when all are done."""
    while True:
        if _fetch_add(counters, DONE, 0) >= jobs:
            return True
        if _fetch_add(counters, FAILED, 0) != 0:
            return False
        _sched_yield()


@njit(cache=True, nogil=True)
def settle(counters, jobs, wait):  # noqa: ANN001, ANN201
    """A loop's return once this thread finds nothing left to claim: with ``wait`` (the
    caller's thread), :func:`wait_done`; a helper returns True at once."""
    return wait_done(counters, jobs) if wait else True
