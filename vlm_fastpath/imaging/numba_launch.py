"""The numba runtime every processor shares: lazily imported kernels and one launch rule.

Importing a compiled kernel module imports numba (hundreds of milliseconds), so each processor
holds one ``LazyKernels`` and imports its kernels on first use. When numba is switched off
(``VLM_FASTPATH_NUMBA=0``) or not importable, the parallel and serial kernels stay None and the
processor runs its numpy version (same bytes). The instance also records the process and
threading layer of its first parallel launch, which decides whether a forked child may launch.

Parallel launches (:func:`launch`) follow one process-wide rule, whichever model's kernel it
is: numba's ``workqueue`` layer (the one vLLM forces) aborts when two threads enter *any*
parallel kernel at once, so every launch holds one lock (re-created in forked children); the
``workqueue`` layer is chosen unless the user chose one; and a forked child of a process that
launched a fork-unsafe layer (GNU OpenMP) runs the serial build of the same kernel.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from .. import settings
from .resize_pool import pool_size
from .threading_layer import ensure_loadable_threading_layer

logger = logging.getLogger(__name__)


class LazyKernels:
    """``module`` (dotted) defines ``patchify_parallel`` and ``patchify_serial``."""

    def __init__(self, module: str, label: str) -> None:
        self.module = module
        self.label = label  # what the log lines call the numpy fallback
        self.load_lock = threading.Lock()
        self.loaded = False
        self.parallel: Callable[..., None] | None = None
        self.serial: Callable[..., None] | None = None
        self.compiled: Any = None  # the module, for its other kernels (``kernel``)
        self.launch_pid: int | None = None
        self.launch_layer: str | None = None
        self.numba_error: str | None = None
        self._columns: dict[str, dict[str, int]] = {}

    def load(self) -> None:
        if self.loaded:
            return
        with self.load_lock:
            if not self.loaded:
                self._import()
                self.loaded = True

    def _import(self) -> None:
        if not settings.numba_allowed():
            self.numba_error = "disabled by VLM_FASTPATH_NUMBA=0"
            logger.info("vlm_fastpath: numba %s; using the numpy %s", self.numba_error,
                        self.label)
            return
        try:
            compiled = importlib.import_module(self.module)
        except ImportError as exc:
            self.numba_error = f"numba not importable ({exc})"
            logger.warning("vlm_fastpath: %s; using the slower numpy %s (same output)",
                           self.numba_error, self.label)
            return
        self.compiled = compiled
        self.parallel = compiled.patchify_parallel
        self.serial = compiled.patchify_serial

    def kernel(self, name: str) -> Callable[..., None] | None:
        """Another kernel of the module (None where numba is off or missing)."""
        self.load()
        return getattr(self.compiled, name) if self.compiled is not None else None

    def columns(self, prefix: str) -> dict[str, int]:
        """The module's constants named ``prefix...`` (a frame table's column numbers), read
        once: a call that fills a table row by name then costs no ``dir()`` of the module."""
        found = self._columns.get(prefix)
        if found is None:
            self.load()
            module = self.compiled
            found = {name: getattr(module, name) for name in dir(module)
                     if name.startswith(prefix)} if module is not None else {}
            self._columns[prefix] = found
        return found

    def available(self) -> bool:
        """True when the compiled kernels will be used."""
        self.load()
        return self.parallel is not None

    def info(self) -> dict[str, Any]:
        """What the kernels run on, for ``doctor`` and the benchmarks."""
        self.load()
        info: dict[str, Any] = {"numba": self.parallel is not None}
        if self.numba_error:
            info["reason"] = self.numba_error
        if self.launch_layer:
            info["threading_layer"] = self.launch_layer
        return info


FORK_UNSAFE_LAYERS = frozenset({"omp"})

_LAUNCH = {"lock": threading.Lock()}
_ALL_KERNELS: list[LazyKernels] = []


def _reset_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in the child.
    _LAUNCH["lock"] = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def kernels(module: str, label: str) -> LazyKernels:
    """A processor's kernels, known to the launch rule (a fork-unsafe launch of any of them
    makes every parallel kernel serial in forked children)."""
    lazy = LazyKernels(module, label)
    _ALL_KERNELS.append(lazy)
    return lazy


def launch_lock() -> threading.Lock:
    """The one lock every parallel launch holds (this process's)."""
    return _LAUNCH["lock"]


def launched_unsafe_in_parent() -> bool:
    """True in a forked child whose parent launched any of our kernels on a fork-unsafe
    threading layer: a parallel launch here would abort."""
    pid = os.getpid()
    return any(
        k.launch_pid is not None and k.launch_pid != pid and k.launch_layer in FORK_UNSAFE_LAYERS
        for k in _ALL_KERNELS
    )


def _choose_layer() -> None:
    import numba

    if "NUMBA_THREADING_LAYER" in os.environ:
        return  # the user (or the engine) chose; respect it
    if numba.config.THREADING_LAYER in ("default", "safe", "forksafe", "threadsafe"):
        numba.config.THREADING_LAYER = "workqueue"


def parallel_threads() -> int:
    """numba threads for the next parallel launch (call under the launch lock, on the
    launching thread): ``VLM_FASTPATH_RESIZE_THREADS`` / the usable cores, as for the resize
    pools, so one variable bounds every thread we run; 1 means run the serial kernel. Above 1
    it picks the threading layer first (numba starts its threads when the count is set) and
    sets numba's count for this thread."""
    import numba

    threads = min(pool_size(), numba.config.NUMBA_NUM_THREADS)
    if threads > 1:
        _choose_layer()
        ensure_loadable_threading_layer()
        numba.set_num_threads(threads)
    return threads


def launch(lazy: LazyKernels, parallel: Callable[..., None] | None,
           serial: Callable[..., None], args: tuple[Any, ...]) -> None:
    """Run ``parallel(*args)`` under the launch lock on as many threads as the resize pools,
    or ``serial(*args)`` where that is 1 thread, where numba is missing the parallel build, and
    in a forked child where a parallel launch would abort; records ``lazy``'s first launch."""
    with launch_lock():
        if parallel is None or launched_unsafe_in_parent() or parallel_threads() <= 1:
            serial(*args)
            return
        parallel(*args)
        if lazy.launch_pid is None:
            import numba

            lazy.launch_pid = os.getpid()
            lazy.launch_layer = numba.threading_layer()
