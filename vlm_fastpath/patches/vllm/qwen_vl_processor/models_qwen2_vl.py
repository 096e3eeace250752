"""vLLM ``vllm.model_executor.models.qwen2_vl``: Qwen2-VL hands out our image processor.

``Qwen2VLProcessingInfo.get_hf_processor`` returns vLLM's cached ``Qwen2VLProcessor``;
``get_image_processor``, ``_call_hf_processor`` (through ``ctx.call_hf_processor``) and the
prompt updates all go through it. The wrapper returns a view of that processor whose
``image_processor`` is the exact fast twin (``adapter.processor_view``); the cached object
itself is never modified, so a revert gives vLLM its originals back at once.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import register

QWEN2_VL = "vllm.model_executor.models.qwen2_vl"
VERSIONS = ">=0.22"


def make_get_hf_processor(original: Any, patch: str) -> Any:
    """``get_hf_processor`` returning the view with our image processor (or the original)."""
    from ...adapters.qwen_twin import processor_view

    @functools.wraps(original)
    def get_hf_processor(self: Any, **kwargs: Any) -> Any:
        processor = original(self, **kwargs)
        try:
            return processor_view(processor, patch)
        except Exception as exc:  # noqa: BLE001 - never fail the engine over our processor
            from ...adapters.qwen_twin import logger

            logger.warning("vlm_fastpath: %s: keeping vLLM's processor (%r)", patch, exc)
            return processor

    get_hf_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return get_hf_processor


class QwenProcessingInfoPatch(Patch):
    """Wrap ``<info_class>.get_hf_processor`` in ``trigger`` (shared by the Qwen-VL models)."""

    info_class = "Qwen2VLProcessingInfo"
    engine = "vllm"
    versions = VERSIONS
    backport = False
    upstream_pr = ""

    def _info(self) -> Any:
        return getattr(sys.modules[self.trigger], self.info_class, None)

    def not_needed(self) -> str | None:
        if self._info() is None:
            return f"{self.trigger} has no {self.info_class}"
        return None

    def contract(self) -> str | None:
        """Structure here; behaviour per processor object, before its twin is handed out
        (``adapter.twin_of`` runs ``check_compatible``'s probes and keeps the engine's
        processor, saying why in the status, where they differ)."""
        info = self._info()
        if "get_hf_processor" not in info.__dict__:
            return f"structure: {self.info_class} defines no get_hf_processor"
        return signature_clause(info, "get_hf_processor", ("self", "**"))

    def apply(self, ctx: PatchContext) -> None:
        info = self._info()
        original = info.__dict__.get("get_hf_processor") if info is not None else None
        if not callable(original):
            raise LookupError(f"{self.info_class} defines no get_hf_processor (renamed?)")
        from ...adapters import qwen_twin as adapter

        ctx.set_attr(adapter.SWITCHES, self.name, True)
        ctx.set_attr(info, "get_hf_processor", make_get_hf_processor(original, self.name))


@register
class Qwen2VLProcessorPatch(QwenProcessingInfoPatch):
    name = "vllm-qwen2-vl-processor"
    trigger = QWEN2_VL
    modules = (QWEN2_VL,)
    info_class = "Qwen2VLProcessingInfo"
    summary = "Qwen2-VL images use FastQwen2VLImageProcessor (torch.equal, faster)"
