"""The jobs of one call run inside one GIL-free call per thread, taken from a shared counter.

Why: beside a thread that runs Python (an API server's event loop), every return of a pool
thread to Python waits for the GIL up to the switch interval (5 ms). One task per job pays
that per job, twice; here the caller's thread and each helper make one ``nogil`` call that
claims jobs until none is left (``_numba_jobs``), so a call pays it about once on its
critical path: the caller's own return. The caller never waits for a helper that has not
started (it takes those jobs itself), so concurrent calls on a busy pool cannot deadlock.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np

from .resize_pool import get_pool

# counters slots, shared with the kernels' ``_numba_jobs``
NEXT, DONE, FAILED = 0, 1, 2
SLOTS = 3


def even_edges(total: int, parts: int) -> np.ndarray:
    """int64 edges cutting ``0 .. total`` into ``parts`` near-equal runs, empty runs dropped.
    Plain Python, not ``np.unique``: numpy's sort releases the GIL, and taking it back beside
    a thread that runs Python waits up to the switch interval (5 ms)."""
    return np.array(sorted({round(k * total / parts) for k in range(parts + 1)}), np.int64)


class JobLoopError(RuntimeError):
    """A helper thread's job loop failed without an exception of its own to report."""


# Arrays of at least this size reach the helpers as views that do not own their memory.
DETACH_BYTES = 1 << 20


def _detached(value: Any) -> Any:
    """A large C-contiguous array as a view of the same memory that holds no reference to its
    owner (same dtype, shape and write flag: the kernels' same specialization), else
    ``value``. A helper may return to Python, and drop its arguments, after the call has
    returned; the owner is then free to go back to the output pool at once."""
    if (not isinstance(value, np.ndarray) or value.nbytes < DETACH_BYTES
            or not value.flags.c_contiguous):
        return value
    memory = (ctypes.c_char * value.nbytes).from_address(value.ctypes.data)
    view = np.frombuffer(memory, value.dtype).reshape(value.shape)
    if not value.flags.writeable:
        view.setflags(write=False)
    return view


class _Helpers:
    """What a call lends its helpers: the loop's arguments until the call ends. A helper that
    starts after that finds none, so a queued helper never holds the call's arrays (an output
    still referenced by a queued task could not go back to the output pool for the next call:
    measured, a 283 MB Qwen3-VL clip then faulted in fresh memory, 260-430 ms against 85).

    The large arrays are lent as views that do not own their memory (:func:`_detached`), so
    when every job is done the call returns without waiting for its helpers to take the GIL
    back (beside a thread running Python, up to two switch intervals: 5 ms each). They touch
    no array memory once the jobs are done. When a thread failed, a helper may still be
    inside a job: then the call waits for every helper inside its loop before it returns."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.lock = threading.Lock()
        self.args: tuple[Any, ...] | None = tuple(_detached(value) for value in args)
        self.active = 0  # helpers inside the loop now
        self.idle = threading.Event()

    def close(self, wait: bool) -> None:
        """The call ends: no new helper takes the arguments; with ``wait``, wait for those
        inside their loop."""
        with self.lock:
            self.args = None
            active = self.active
        if active and wait:
            self.idle.wait()


def _help(loop: Callable[..., Any], counters: np.ndarray, helpers: _Helpers) -> None:
    with helpers.lock:
        args = helpers.args
        if args is None:  # started after the call ended: nothing left to do
            return
        helpers.active += 1
    try:
        loop(counters, *args, False)
    except BaseException:
        counters[FAILED] = 1  # the caller stops waiting, the others stop claiming
        raise
    finally:
        del args  # (a stored traceback keeps this frame, not the call's arrays)
        with helpers.lock:
            helpers.active -= 1
            if helpers.active == 0 and helpers.args is None:
                helpers.idle.set()


def run_jobs(loop: Callable[..., Any], jobs: int, args: tuple[Any, ...], workers: int,
             pool: Executor | None = None) -> None:
    """Run ``jobs`` jobs of ``loop(counters, *args, wait)`` (a ``nogil`` kernel that claims
    jobs from ``counters`` and, with ``wait``, waits for every claimed job; it returns False
    when another thread failed) on this thread and up to ``workers - 1`` threads of ``pool``
    (default: the resize pool). Returns when every job is done and no helper holds ``args``'
    large arrays (:class:`_Helpers`); re-raises the first helper's error."""
    counters = np.zeros(SLOTS, np.int64)
    count = max(0, min(workers, jobs) - 1)
    futures: list[Future[None]] = []
    helpers = _Helpers(args)
    if count:
        pool = pool or get_pool()
        futures = [pool.submit(_help, loop, counters, helpers) for _ in range(count)]
    complete = False
    try:
        complete = loop(counters, *args, True)
    except BaseException:
        counters[FAILED] = 1
        raise
    finally:
        helpers.close(wait=not complete)
    if not complete:
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        raise JobLoopError("a helper thread's job loop failed")
