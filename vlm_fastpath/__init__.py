"""vlm-fastpath: a fast image input path for vision-language models in vLLM and SGLang.

Public API in the style of Liger-Kernel's explicit ``apply_*`` functions::

    import vlm_fastpath
    vlm_fastpath.apply()          # every eligible patch of every imported engine
    vlm_fastpath.status()         # list of dicts: name, engine, status, reason, engine_version
    vlm_fastpath.revert()         # restore the engines' original objects

Importing this package imports neither torch nor any engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__version__ = "0.1.0"


def apply(engine: str | None = None, patches: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Apply the eligible patches (all engines, or one); returns their status."""
    from .patches.core.registry import REGISTRY

    return [r.as_dict() for r in REGISTRY.apply(engine, patches)]


def revert(engine: str | None = None, patches: Iterable[str] | None = None) -> None:
    """Undo applied patches, restoring the exact original engine objects."""
    from .patches.core.registry import REGISTRY

    REGISTRY.revert(engine, patches)


def status(engine: str | None = None) -> list[dict[str, Any]]:
    """Status of every known patch in this process."""
    from .patches.core.registry import REGISTRY

    return [r.as_dict() for r in REGISTRY.status(engine)]


__all__ = ["__version__", "apply", "revert", "status"]
