"""The jobs of one call run inside one GIL-free call per thread, taken from a shared counter.

Why: beside a thread that runs Python (an API server's event loop), every return of a pool
thread to Python waits for the GIL up to the switch interval (5 ms). One task per job pays
that per job, twice; here the caller's thread and each helper make one ``nogil`` call that
claims jobs until none is left (``_numba_jobs``), so a call pays it about once on its
critical path: the caller's own return. The caller never waits for a helper that has not
started (it takes those jobs itself), so concurrent calls on a busy pool cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np

from .resize_pool import get_pool

# counters slots, shared with the kernels' ``_numba_jobs``
NEXT, DONE, FAILED = 0, 1, 2
SLOTS = 3


class JobLoopError(RuntimeError):
    """A helper thread's job loop failed without an exception of its own to report."""


def _help(loop: Callable[..., Any], counters: np.ndarray, args: tuple[Any, ...]) -> None:
    try:
        loop(counters, *args, False)
    except BaseException:
        counters[FAILED] = 1  # the caller stops waiting, the others stop claiming
        raise


def run_jobs(loop: Callable[..., Any], jobs: int, args: tuple[Any, ...], workers: int,
             pool: Executor | None = None) -> None:
    """Run ``jobs`` jobs of ``loop(counters, *args, wait)`` (a ``nogil`` kernel that claims
    jobs from ``counters`` and, with ``wait``, waits for every claimed job; it returns False
    when another thread failed) on this thread and up to ``workers - 1`` threads of ``pool``
    (default: the resize pool). Re-raises the first helper's error."""
    counters = np.zeros(SLOTS, np.int64)
    helpers = max(0, min(workers, jobs) - 1)
    futures: list[Future[None]] = []
    if helpers:
        pool = pool or get_pool()
        futures = [pool.submit(_help, loop, counters, args) for _ in range(helpers)]
    try:
        complete = loop(counters, *args, True)
    except BaseException:
        counters[FAILED] = 1
        raise
    if not complete:
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        raise JobLoopError("a helper thread's job loop failed")
