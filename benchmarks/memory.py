"""Peak resident-memory growth during a call, sampled from /proc (no allocator hooks).

tracemalloc misses torch and Pillow allocations; RSS sees them all. A sampler thread reads
/proc/self/statm every millisecond while the call runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:  # pragma: no cover - non-Linux
        return 0


def measure_peak(fn: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run ``fn``; return (result, seconds, peak RSS growth in bytes over the start)."""
    start_rss = rss_bytes()
    peak = [start_rss]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            value = rss_bytes()
            if value > peak[0]:
                peak[0] = value
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        result = fn()
    finally:
        elapsed = time.perf_counter() - t0
        done.set()
        sampler.join()
    peak[0] = max(peak[0], rss_bytes())
    return result, elapsed, peak[0] - start_rss
