"""Recycled output buffers: a freed ``pixel_values`` becomes the next call's output memory.

Why: a server preprocesses every request into a fresh output of tens to hundreds of MB, and
the kernel zeroes each fresh page on first touch. On 2 cores that is ~14 % of a 2048² Kimi
call (33.8 ms fresh vs 29.1 ms reused, same run). Reusing the memory of an output nobody
holds any more skips that zeroing.

How, without ever handing out memory that is still in use: each buffer ("slab") is owned by
the pool and lent through a *lease*, a ctypes array over the slab. The output is a numpy
array over the lease, so every view of it, every ``torch.from_numpy`` tensor and every
``.numpy()`` of those keeps the lease alive (numpy and torch hold the object that owns the
memory). Only when the last of them is gone does the lease die, and its finalizer returns the
slab. Nothing else ever sees the slab itself.

Bounded: at most ``VLM_FASTPATH_BUFFER_POOL_MB`` (default 512 MiB: room for the largest
output of the benchmarked requests, 301 MB for 8x2048² Kimi float32, which a 256 MiB pool
never kept: 146 ms a call against 109 ms reused, same run) of idle slabs, at most
:data:`MAX_IDLE` of them, oldest dropped first; outputs under :data:`MIN_BYTES` or above the
limit are plain ``np.empty`` (numpy asks for transparent huge pages on large ones). A slab is
reused only for a request between half its size and its size. Safe from any thread (returns
arrive from whichever thread drops the last reference, maybe inside the garbage collector,
so they only append to a deque) and in forked children (the child starts with an empty pool
and its own lock).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
import weakref
from collections import deque

import numpy as np

from .. import settings

GRANULE = 2 << 20  # slab sizes are multiples of one huge page (plus ``ALIGN``)
ALIGN = 64  # outputs start on a cache line: the kernels stream whole lines into them
MIN_BYTES = 4 << 20  # smaller outputs are cheap to fault in: not pooled
MAX_IDLE = 4


@functools.lru_cache(maxsize=128)
def _lease_type(nbytes: int) -> type:
    # A Python subclass of a ctypes array type accepts weak references (finalizers).
    return type("OutputLease", (ctypes.c_char * nbytes,), {})


class OutputPool:
    """Idle slabs, and :meth:`empty` that lends one (or a new one) as an output array."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[np.ndarray] = []  # oldest first; touched only under the lock
        self._returned: deque[np.ndarray] = deque()  # appended by finalizers, lock-free
        self.reused = 0
        self.created = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialized C-contiguous array, like ``np.empty(shape, dtype)``; a pooled one
        starts on a 64-byte line (``ALIGN``)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        limit = settings.buffer_pool_bytes()
        if nbytes < MIN_BYTES or nbytes > limit:
            return np.empty(shape, dtype)
        with self._lock:
            self._collect(limit)
            slab = self._take(nbytes)
            if slab is None:
                self.created += 1
            else:
                self.reused += 1
        if slab is None:
            slab = np.empty(-(-nbytes // GRANULE) * GRANULE + ALIGN, np.uint8)
        skip = -slab.ctypes.data % ALIGN
        lease = _lease_type(slab.nbytes - skip).from_buffer(slab, skip)
        returned = weakref.finalize(lease, self._give_back, slab)
        returned.atexit = False
        return np.frombuffer(lease, np.uint8, count=nbytes).view(dtype).reshape(shape)

    def _give_back(self, slab: np.ndarray) -> None:
        # Any thread, maybe inside the garbage collector while this thread holds the lock:
        # so no lock here, only an atomic append (a forked child's new deque after a fork).
        self._returned.append(slab)

    def idle_bytes(self) -> int:
        with self._lock:
            self._collect(settings.buffer_pool_bytes())
            return sum(slab.nbytes for slab in self._idle)

    def _collect(self, limit: int) -> None:
        """Move returned slabs to the idle list and trim it to the limits (lock held)."""
        while self._returned:
            self._idle.append(self._returned.popleft())
        total = sum(slab.nbytes for slab in self._idle)
        while self._idle and (total > limit or len(self._idle) > MAX_IDLE):
            total -= self._idle.pop(0).nbytes

    def _take(self, nbytes: int) -> np.ndarray | None:
        fits = [i for i, slab in enumerate(self._idle)
                if nbytes + ALIGN <= slab.nbytes <= 2 * nbytes + ALIGN]
        if not fits:
            return None
        best = min(fits, key=lambda i: self._idle[i].nbytes)
        return self._idle.pop(best)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._idle = []
        self._returned = deque()


POOL = OutputPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL._after_fork)


def pool_info() -> dict[str, int | float]:
    """This process's pool, for ``doctor``: its limit, idle memory and how often it served."""
    return {"limit_mb": settings.buffer_pool_bytes() >> 20,
            "idle_mb": round(POOL.idle_bytes() / (1 << 20), 1),
            "reused": POOL.reused, "created": POOL.created}


def empty_output(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A processor's output array: recycled memory when a freed one fits (see module doc)."""
    return POOL.empty(shape, dtype)
