"""A small task pool for GIL-free kernels: many callers at once, no lock around whole calls.

Why not ``ThreadPoolExecutor``: a call's tasks create more tasks (decoding one frame yields
its bands), and those must run before the next frame is decoded, or every source image of a
batch would sit in memory at once. Here a task may queue follow-ups at the front. Each call
collects its tasks in a :class:`TaskGroup` and waits for that group only, so concurrent
callers share the workers instead of taking turns, and no worker ever waits on another task
(no deadlock however the pool is shared). Threads are created lazily; a forked child starts
with no pool (its parent's threads do not exist there) and makes its own on first use.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .resize_pool import default_workers


class TaskGroup:
    """The tasks of one call; :meth:`wait` returns when all (and their follow-ups) are done."""

    def __init__(self, pool: BandPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._pending = 1  # the caller's token: nothing completes while tasks are still added
        self._done = threading.Event()
        self.error: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any, urgent: bool = False) -> None:
        """Queue ``fn(*args)``; ``urgent`` tasks run before every queued non-urgent one."""
        with self._lock:
            self._pending += 1
        self._pool.put((self, fn, args), urgent)

    def finish(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            self._pending -= 1
            last = self._pending == 0
        if last:
            self._done.set()

    def fail(self, error: BaseException) -> None:
        """Record an error raised outside a task (queued tasks of the group are skipped)."""
        with self._lock:
            if self.error is None:
                self.error = error

    def wait(self) -> None:
        """Release the caller's token, wait for every task, re-raise the first error."""
        self.finish(None)
        self._done.wait()
        if self.error is not None:
            raise self.error


_Task = tuple[TaskGroup, Callable[..., Any], tuple[Any, ...]]


class BandPool:
    """Worker threads that run queued ``(group, fn, args)`` tasks, urgent ones first."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._cond = threading.Condition(threading.Lock())
        self._tasks: deque[_Task] = deque()
        self._threads: list[threading.Thread] = []

    def group(self) -> TaskGroup:
        return TaskGroup(self)

    def put(self, task: _Task, urgent: bool) -> None:
        with self._cond:
            if urgent:
                self._tasks.appendleft(task)
            else:
                self._tasks.append(task)
            if len(self._threads) < self.workers:
                thread = threading.Thread(
                    target=self._work, name=f"vlm-fastpath-band-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._tasks:
                    self._cond.wait()
                group, fn, args = self._tasks.popleft()
            if group.error is not None:  # the call already failed: skip the rest of it
                group.finish(None)
                continue
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                group.finish(exc)
            else:
                group.finish(None)


_lock = threading.Lock()
_pool: BandPool | None = None


def get_band_pool() -> BandPool:
    """The process-wide pool, sized by :func:`.resize_pool.default_workers` at creation."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = BandPool(default_workers())
        return _pool


def _forget_after_fork() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
