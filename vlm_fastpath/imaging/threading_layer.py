"""Keep numba's parallel kernels usable when the requested threading layer cannot load.

numba reads ``NUMBA_THREADING_LAYER`` once and, when the named layer's library is missing
(``tbb`` without the ``tbb`` package is the usual case), every parallel call raises
``ValueError: No threading layer could be loaded``: one bad environment variable would make
every image request fail. ``ensure_loadable_threading_layer`` runs before the first parallel
launch, tries the requested layer's candidates the way numba will, and switches to
``workqueue`` (always built in) with one warning when none of them loads. The kernels keep
their own lock around parallel launches, so ``workqueue`` is safe there.
"""

from __future__ import annotations

import importlib
import threading

from .._log import get_logger

logger = get_logger("vlm_fastpath.imaging")

FALLBACK_LAYER = "workqueue"
# What each NUMBA_THREADING_LAYER value may load, in numba's order of preference.
_CANDIDATES: dict[str, tuple[str, ...]] = {
    "tbb": ("tbb",),
    "omp": ("omp",),
    "workqueue": ("workqueue",),
    "safe": ("tbb",),
    "threadsafe": ("tbb", "omp"),
    "forksafe": ("tbb", "omp"),
    "default": ("tbb", "omp", "workqueue"),
}
_POOL_MODULES = {
    "tbb": "numba.np.ufunc.tbbpool",
    "omp": "numba.np.ufunc.omppool",
    "workqueue": "numba.np.ufunc.workqueue",
}
_lock = threading.Lock()
_decided: dict[str, str] = {}  # requested layer -> the layer left configured


def layer_loads(layer: str) -> bool:
    """True when numba's pool module for ``layer`` imports (its shared library is present)."""
    module = _POOL_MODULES.get(layer)
    if module is None:
        return False
    try:
        importlib.import_module(module)
    except (ImportError, OSError):
        return False
    return True


def ensure_loadable_threading_layer() -> str:
    """Switch numba to ``workqueue`` if the configured layer cannot load; returns the layer.

    Cheap after the first call (decided once per requested value). Does nothing when numba
    is not installed.
    """
    try:
        import numba
    except ImportError:
        return ""
    requested = str(numba.config.THREADING_LAYER).strip().lower()
    with _lock:
        if requested in _decided:
            return _decided[requested]
        candidates = _CANDIDATES.get(requested)
        chosen = requested
        if candidates is not None and not any(layer_loads(layer) for layer in candidates):
            chosen = FALLBACK_LAYER
            numba.config.THREADING_LAYER = FALLBACK_LAYER
            logger.warning(
                "vlm_fastpath: numba threading layer %r cannot load here (its library is not "
                "installed); using %r so the kernels keep working",
                requested,
                FALLBACK_LAYER,
            )
        _decided[requested] = chosen
        _decided[chosen] = chosen
        return chosen
