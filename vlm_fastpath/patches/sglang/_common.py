"""Small helpers shared by the SGLang patches (no engine import at module import time)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..core.base import source_text as source_of  # noqa: F401 - the sglang patches' name for it

# Model classes whose ``get_image_feature``/``get_video_feature`` concatenate every item's
# feature into one tensor before the vision tower, so one batched host-to-device copy can replace
# the per-item early moves.
BATCHED_FEATURE_MODELS: frozenset[str] = frozenset(
    {
        "KimiK25ForConditionalGeneration",  # Kimi K2.5 / K2.7 (same class)
        "KimiK3ForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    }
)
FEATURE_METHODS = ("get_image_feature", "get_video_feature")

SGLANG_PREFIXES = ("sglang.",)


def module(name: str) -> ModuleType:
    """An already-imported engine module (patches run after their trigger imported)."""
    mod = sys.modules.get(name)
    if mod is None:
        import importlib

        mod = importlib.import_module(name)
    return mod


def owner_class_name(func: Callable[..., Any] | None) -> str | None:
    """Class name of a bound ``get_image_feature``/``get_video_feature``; else None."""
    if func is None or getattr(func, "__name__", None) not in FEATURE_METHODS:
        return None
    owner = getattr(func, "__self__", None)
    return None if owner is None else type(owner).__name__


def grid_of(data: dict[str, Any] | None, item: Any = None) -> Any:
    """An item's ``[t, h, w]`` grid: Qwen-VL names it ``image_grid_thw``, Kimi ``grid_thws``
    (in ``model_specific_data``); ``item.image_grid_thw`` when given and neither is there."""
    data = data or {}
    grid = data.get("image_grid_thw")
    if grid is None:
        grid = data.get("grid_thws")
    if grid is None and item is not None:
        grid = item.image_grid_thw
    return grid


def require(owner: Any, *names: str) -> None:
    """Fail the patch (the registry then leaves the engine alone) if a name is missing."""
    missing = [name for name in names if not hasattr(owner, name)]
    if missing:
        raise AttributeError(f"{getattr(owner, '__name__', owner)!r} lacks {', '.join(missing)}")


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False
