"""Waiting, without the GIL, for the rows a decoder has written; numba, imported lazily.

Why: a codec library fills its output buffer row by row inside one call and says nothing
until the end. ``row_progress`` marks the last bytes of every row before the call; a waiter
here reads those marks with atomic loads and learns how far the decoder got.

How: rows are written in order, each once. So when row ``r``'s mark is gone, the decoder
has finished every row before ``r`` (x86-64 makes a thread's stores visible to other cores
in the order it made them; ``row_progress`` checks the machine). Row ``r`` itself counts
only once a later row's mark is gone, or the decode is over. A waiter far from its rows
sleeps between polls. A row whose real last bytes
equal the mark stops the scan there until the decode ends: later, never wrong.
"""

from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_sched_yield = types.ExternalFunction("sched_yield", types.int32())
_usleep = types.ExternalFunction("usleep", types.int32(types.uint32))
# A waiter more than NEAR_ROWS rows short of what it needs naps between polls: a 12 MP JPEG
# writes a row every ~10 us on one core, so a strip's rows take milliseconds, and a waiter that
# only yielded would keep a core busy all that time (beside an engine's other threads, time
# the decoder itself loses). Close to its rows, or after SPINS polls without news (a
# progressive JPEG writes no row until its last pass), the same.
NEAR_ROWS = 32
SPINS = 256
NAP_US = 200


@intrinsic
def _load_acquire(typingctx, array, index):  # noqa: ANN001, ANN202, ARG001
    """``array[index]`` read as one atomic acquire load: the compiler may neither drop it
    from a polling loop nor move later reads before it."""
    sig = array.dtype(array, types.intp)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        array_type = signature.args[0]
        arr = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, arr, [args[1]])
        width = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
        return builder.load_atomic(ptr, "acquire", width)

    return sig, codegen


@njit(cache=True, nogil=True)
def _first_marked(rows, mark, start):  # noqa: ANN001, ANN201
    """The first row from ``start`` on whose last bytes still hold ``mark`` (len(rows) if
    none)."""
    height, row_bytes = rows.shape
    tail = mark.shape[0]
    r = start
    while r < height:
        flat = rows[r]
        same = True
        for i in range(tail):
            if _load_acquire(flat, row_bytes - tail + i) != mark[i]:
                same = False
                break
        if same:
            return r
        r += 1
    return height


@njit(cache=True, nogil=True)
def wait_rows(rows, mark, state, need, start):  # noqa: ANN001, ANN201
    """Wait until the first ``need`` rows of ``rows`` (uint8 ``[H, row_bytes]``) are written
    or the decode is over; returns how many rows are known written (``H`` once the decode is
    done), or -1 when it was aborted. ``state[0]``: 0 while the decoder runs, positive once it
    returned its image, negative when it failed (``row_progress``). ``start``: rows already
    known written."""
    height = rows.shape[0]
    known = start
    idle = 0
    while True:
        flag = _load_acquire(state, 0)
        if flag > 0:
            return height
        if flag < 0:
            return -1
        first = _first_marked(rows, mark, max(known, 0))
        # every row before the first still marked one is finished, except that row's
        # predecessor, whose mark may be gone while it is still being written
        if first - 1 > known:
            known = first - 1
            idle = 0
        if known >= need:
            return known
        idle += 1
        if idle < SPINS and need - known <= NEAR_ROWS:
            _sched_yield()
        else:
            _usleep(NAP_US)
