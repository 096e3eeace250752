"""A process-wide thread pool for Pillow resizes.

Pillow releases the GIL while resizing, so one thread per core scales with cores. The pool is
created lazily and dropped in forked children (its threads do not exist there).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def available_cpus() -> int:
    """Cores this process may run on (affinity-aware, unlike ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    value = os.environ.get("VLM_FASTPATH_RESIZE_THREADS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    return available_cpus()


def pool_size() -> int:
    """Worker count of the (possibly not yet created) pool."""
    return default_workers()


def get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=default_workers(), thread_name_prefix="vlm-fastpath-resize"
            )
        return _pool


def _forget_after_fork() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
