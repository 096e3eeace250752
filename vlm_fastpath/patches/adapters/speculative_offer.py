"""A processor an engine patch hands out, offered to the decode layer while its patch serves.

Why: the decode layer starts the offered processor on a large image while the engine's loader
decodes it (``vlm_fastpath.imaging.decode.speculation``, issue #30). That work is worth its
CPU only while the patch's processor is the one the engine will call: not once the patch is
reverted or quarantined for faults (the engine's own processor then answers).

Engine-neutral: the vLLM and SGLang adapters (``qwen_twin``, ``kimi_vision``) make one per
processor they hand out, hold it, and offer it; the decode layer holds it weakly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.containment import LEDGER


class SpeculativeOffer:
    """``fast.start`` (``FastQwen2VLImageProcessor``, ``FusedKimiProcessor``) while ``patch``
    is not quarantined and ``serving(patch)`` (a module-level function: the offer pickles
    with the processor that holds it) says it still serves."""

    def __init__(self, fast: Any, patch: str, serving: Callable[[str], bool] | None = None):
        self.fast = fast
        self.patch = patch
        self.serving = serving

    def start(self, mode: str, pixels: Any, progress: Any) -> Any:
        if LEDGER.is_disabled(self.patch) or (
                self.serving is not None and not self.serving(self.patch)):
            return None
        return self.fast.start(mode, pixels, progress)

    def offer(self) -> None:
        from vlm_fastpath.imaging.decode import speculation

        speculation.offer(self)
