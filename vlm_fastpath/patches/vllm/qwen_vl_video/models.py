"""vLLM's Qwen2-VL, Qwen2.5-VL and Qwen3-VL processing infos hand out our video processor.

Each model's ``ProcessingInfo.get_hf_processor`` (Qwen2.5-VL's and Qwen3-VL's define their
own) returns vLLM's cached HF processor; ``get_video_processor`` and every HF call of a video
request go through it. The wrapper returns a view of it whose ``video_processor`` is the exact
twin (``adapters.qwen_video_twin.processor_view``), stacked on the image patch's wrapper
where that one applies (then the view carries both twins). The cached object itself is never
modified.
"""

from __future__ import annotations

import functools
from typing import Any

from ...core.base import PatchContext
from ...core.registry import register
from ..qwen_vl_processor.models_qwen2_vl import VERSIONS, QwenProcessingInfoPatch

QWEN2_VL = "vllm.model_executor.models.qwen2_vl"
QWEN2_5_VL = "vllm.model_executor.models.qwen2_5_vl"
QWEN3_VL = "vllm.model_executor.models.qwen3_vl"


def make_get_hf_processor(original: Any, patch: str) -> Any:
    """``get_hf_processor`` returning the view with our video processor (or the original)."""
    from ...adapters.qwen_video_twin import logger, processor_view

    @functools.wraps(original)
    def get_hf_processor(self: Any, **kwargs: Any) -> Any:
        processor = original(self, **kwargs)
        try:
            return processor_view(processor, patch)
        except Exception as exc:  # noqa: BLE001 - never fail the engine over our processor
            logger.warning("vlm_fastpath: %s: keeping vLLM's processor (%r)", patch, exc)
            return processor

    get_hf_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return get_hf_processor


class QwenVideoPatch(QwenProcessingInfoPatch):
    """The image patch's structure contract (``get_hf_processor(self, **kwargs)`` on the
    info class); the behaviour clause runs per video processor
    (``adapters.qwen_video_twin.twin_of``)."""

    versions = VERSIONS

    def apply(self, ctx: PatchContext) -> None:
        info = self._info()
        original = info.__dict__.get("get_hf_processor") if info is not None else None
        if not callable(original):
            raise LookupError(f"{self.info_class} defines no get_hf_processor (renamed?)")
        from ...adapters import qwen_video_twin as video_adapter

        ctx.set_attr(video_adapter.SWITCHES, self.name, True)
        ctx.set_attr(info, "get_hf_processor", make_get_hf_processor(original, self.name))


@register
class Qwen2VLVideoPatch(QwenVideoPatch):
    name = "vllm-qwen2-vl-video-processor"
    trigger = QWEN2_VL
    modules = (QWEN2_VL,)
    info_class = "Qwen2VLProcessingInfo"
    requires = ("vllm-qwen2-vl-processor",)
    summary = "Qwen2-VL videos use FastQwen2VLVideoProcessor (torch.equal, faster)"


@register
class Qwen25VLVideoPatch(QwenVideoPatch):
    name = "vllm-qwen2-5-vl-video-processor"
    trigger = QWEN2_5_VL
    modules = (QWEN2_5_VL,)
    info_class = "Qwen2_5_VLProcessingInfo"
    requires = ("vllm-qwen2-5-vl-processor",)
    summary = "Qwen2.5-VL videos use FastQwen2VLVideoProcessor (torch.equal, faster)"


@register
class Qwen3VLVideoPatch(QwenVideoPatch):
    name = "vllm-qwen3-vl-video-processor"
    trigger = QWEN3_VL
    modules = (QWEN3_VL,)
    info_class = "Qwen3VLProcessingInfo"
    requires = ("vllm-qwen3-vl-processor",)
    summary = "Qwen3-VL videos use FastQwen3VLVideoProcessor (torch.equal, faster)"
