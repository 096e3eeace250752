"""vLLM ``vllm.multimodal.processing.context``: every model's Qwen-VL video processor is ours.

Stacked on the image patch's wrappers of ``InputProcessingContext.get_hf_processor`` and
``.call_hf_processor`` (same attributes; it requires that patch): the processor vLLM hands on
is a view whose ``video_processor`` is the exact twin (``adapters.qwen_video_twin``), where it
holds transformers' ``Qwen2VLVideoProcessor`` or ``Qwen3VLVideoProcessor``, whatever model
holds it. ``get_video_processor`` and every HF call of a video request go through it.
"""

from __future__ import annotations

from ...core.registry import register
from ..qwen_vl_processor.multimodal_processing_context import (
    VIDEO_MODELS,
    ProcessingContextPatch,
    model_table,
)


@register
class QwenVLVideoProcessorPatch(ProcessingContextPatch):
    name = "vllm-qwen-vl-video-processor"
    kind_module = "qwen_video_twin"
    models = model_table("video", VIDEO_MODELS)
    requires = ("vllm-qwen-vl-image-processor",)
    summary = ("Qwen-VL video processors (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor) of "
               "every model use our fast twins (torch.equal, faster)")
