"""What the compact-row patches of both engines require of a Qwen vision tower's patch embedding.

The expansion (``qwen_integration.compact.expand``) restores rows laid out as ``[channel,
temporal copy, py, px]``; a patch may expand only where the engine's patch embedding reads its
rows in that order. vLLM views them ``(L, -1, T, P, P)``, SGLang ``(-1, C, T, P, P)``.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.base import source_text

_LAYOUT = re.compile(
    r"\.view\(\s*[\w-]+\s*,\s*(?:-1|self\.in_channels)\s*,\s*self\.temporal_patch_size\s*,"
    r"\s*self\.patch_size\s*,\s*self\.patch_size\s*,?\s*\)"
)


def embed_clause(module: Any, embed: str) -> str | None:
    """None where ``module.<embed>.forward`` views its rows as ``[C, T, P, P]``, else the
    contract clause that fails."""
    cls = getattr(module, embed, None)
    if cls is None:
        return f"structure: {module.__name__} has no {embed}"
    if not _LAYOUT.search(source_text(cls.forward)):
        return (f"structure: {embed}.forward does not view its rows as "
                "[C, temporal_patch_size, patch_size, patch_size]")
    return None
