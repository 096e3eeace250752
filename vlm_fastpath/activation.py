"""How patches get applied in every engine process, from three entry doors.

- ``register_vllm`` / ``register_sglang``: the engines' plugin entry points. Safe to call any
  number of times; they import nothing heavy and defer each patch to the import of its module.
- ``bootstrap``: called from ``vlm_fastpath.pth`` at interpreter start. It only watches for the
  top-level ``vllm``/``sglang`` imports, then does what the entry point does. It never imports
  torch or an engine, and swallows every error (a broken install must not stop Python).
"""

from __future__ import annotations

import threading

from . import settings

_ENGINES = ("vllm", "sglang")
_armed: set[str] = set()
_lock = threading.Lock()


def _disabled() -> bool:
    return not settings.enabled()


def _apply_trigger(module_name: str) -> None:
    from .patches.core.registry import REGISTRY

    REGISTRY.apply(trigger=module_name)


def arm(engine: str) -> None:
    """Schedule every patch of ``engine`` to apply when its trigger module is imported."""
    if _disabled():
        return
    with _lock:
        if engine in _armed:
            return
        _armed.add(engine)
    from ._import_hook import when_imported
    from .patches.core.registry import REGISTRY

    triggers = sorted({patch.trigger for patch in REGISTRY.patches(engine)})
    for trigger in triggers:
        when_imported(trigger, _apply_trigger)


def register_vllm() -> None:
    """``vllm.general_plugins`` entry point (runs in API server, EngineCore and workers)."""
    try:
        arm("vllm")
    except Exception as exc:  # noqa: BLE001
        from ._log import get_logger

        get_logger().warning("vlm_fastpath: vLLM plugin could not arm its patches: %s", exc)


def register_sglang() -> None:
    """``sglang.srt.plugins`` entry point (main process and every scheduler/TP process)."""
    try:
        arm("sglang")
    except Exception as exc:  # noqa: BLE001
        from ._log import get_logger

        get_logger().warning("vlm_fastpath: SGLang plugin could not arm its patches: %s", exc)


def bootstrap() -> None:
    """``.pth`` door: arm an engine's patches once its top-level package is imported."""
    if _disabled():
        return
    from ._import_hook import when_imported

    for engine in _ENGINES:
        when_imported(engine, _arm_quietly)


def _arm_quietly(engine: str) -> None:
    try:
        arm(engine)
    except Exception:  # noqa: BLE001
        pass
