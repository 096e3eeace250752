"""Lazily imported numba kernels, shared by the Kimi and Qwen-VL processors.

Importing a compiled kernel module imports numba (hundreds of milliseconds), so each processor
holds one ``LazyKernels`` and imports its kernels on first use. When numba is switched off
(``VLM_FASTPATH_NUMBA=0``) or not importable, the parallel and serial kernels stay None and the
processor runs its numpy version (same bytes). The instance also records the process and
threading layer of the first parallel launch, which decides whether a forked child may launch.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from . import settings

logger = logging.getLogger(__name__)


class LazyKernels:
    """``module`` (dotted) defines ``patchify_parallel`` and ``patchify_serial``."""

    def __init__(self, module: str, label: str) -> None:
        self.module = module
        self.label = label  # what the log lines call the numpy fallback
        self.lock = threading.Lock()  # serializes parallel launches where the caller asks
        self.load_lock = threading.Lock()
        self.loaded = False
        self.parallel: Callable[..., None] | None = None
        self.serial: Callable[..., None] | None = None
        self.compiled: Any = None  # the module, for its other kernels (``kernel``)
        self.launch_pid: int | None = None
        self.launch_layer: str | None = None
        self.numba_error: str | None = None

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

    def reset_after_fork(self) -> None:
        # A lock held by another thread at fork time would stay held forever in the child.
        self.lock = threading.Lock()
