"""Process-wide worker threads for resizes, and how many of them a process should run.

Pillow and the numba resampler release the GIL while they work, so one thread per usable core
scales with cores. "Usable" means the CPU affinity mask and the cgroup CPU quota (a container
limited to 2 CPUs on a 64-core host must not start 64 threads), capped at
:data:`MAX_DEFAULT_THREADS`; ``VLM_FASTPATH_RESIZE_THREADS`` overrides it. Pools are created
lazily and dropped in forked children (their threads do not exist there).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .. import settings

THREADS_ENV = "VLM_FASTPATH_RESIZE_THREADS"
POOL_THREAD_PREFIX = "vlm-fastpath-resize"  # the pool's thread names start with it
MAX_DEFAULT_THREADS = 8  # beyond this, memory bandwidth (not cores) bounds one call

_lock = threading.Lock()
# (pool, its worker count), set as one object so pool_size() can read it without the lock
_pool: tuple[ThreadPoolExecutor, int] | None = None


def _affinity_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_cgroup_dirs(root: Path, controller: str | None) -> list[Path]:
    """This process's cgroup folder (from /proc/self/cgroup) and the mount root."""
    dirs = []
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",") if parts[1] else []
        if (controller is None and not controllers) or (controller in controllers):
            dirs.append(root / parts[2].lstrip("/"))
    dirs.append(root)
    return dirs


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or None."""
    for folder in _own_cgroup_dirs(root, None):
        text = _read(folder / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota == "max":
                return None
            try:
                return int(quota) / int(period or "100000")
            except (ValueError, ZeroDivisionError):
                return None
    for base in (root / "cpu,cpuacct", root / "cpu"):
        for folder in _own_cgroup_dirs(base, "cpu"):
            quota_text = _read(folder / "cpu.cfs_quota_us")
            period_text = _read(folder / "cpu.cfs_period_us")
            if quota_text is None or period_text is None:
                continue
            try:
                quota, period = int(quota_text), int(period_text)
            except ValueError:
                return None
            return None if quota <= 0 or period <= 0 else quota / period
    return None


def available_cpus() -> int:
    """Cores this process may use: affinity mask, then the cgroup quota (rounded up)."""
    cpus = _affinity_cpus()
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return cpus


def default_workers() -> int:
    """``VLM_FASTPATH_RESIZE_THREADS`` when set, else the usable cores capped at 8."""
    chosen = settings.resize_threads()
    if chosen is not None:
        return chosen
    return min(MAX_DEFAULT_THREADS, available_cpus())


def pool_size() -> int:
    """Worker count of the pool: the created pool's own (no cgroup files read per call, and
    the number the pool really has), else what it would be created with."""
    created = _pool
    return created[1] if created is not None else default_workers()


def get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            workers = default_workers()
            _pool = (ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix=POOL_THREAD_PREFIX), workers)
        return _pool[0]


def _forget_after_fork() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def wait_all(futures: list[Future[None]]) -> None:
    """Wait for every future, raising the first failure; those not yet started are cancelled
    on the way out, so a failed call leaves no work of its own queued."""
    try:
        for future in futures:
            future.result()
    finally:
        for future in futures:
            future.cancel()
