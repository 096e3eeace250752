"""Patch of ``sglang.srt.multimodal.processors.base_processor``: Qwen-VL videos through our twin.

sglang-qwen-vl-cpu-video-processor
    Why: transformers' Qwen-VL video processor is most of a video request's CPU time; ours
    gives the same ``pixel_values_videos``/``video_grid_thw`` faster.
    How: stacked on the image patch's wrapper of ``BaseMultimodalProcessor.__init__`` (it
    requires that patch): the ``_processor`` view gets a ``video_processor`` twin, wherever it
    holds ``Qwen2VLVideoProcessor``/``Qwen3VLVideoProcessor``; SGLang's own
    ``preprocess_video`` (sampling, bilinear resize) is untouched, and its worker pool's
    ``deepcopy`` of the view is a twin too. Processors built while the patch was applied keep
    the view after a revert, but the twin then answers with transformers' code.
"""

from __future__ import annotations

from ...core.registry import register
from ..qwen_vl_processor.multimodal_processors_base_processor import (
    VIDEO_MODELS,
    BaseProcessorPatch,
    model_table,
)

PATCH = "sglang-qwen-vl-cpu-video-processor"


@register
class QwenVLCpuVideoProcessorPatch(BaseProcessorPatch):
    name = PATCH
    kind_module = "qwen_video_twin"
    models = model_table("video", VIDEO_MODELS)
    requires = ("sglang-qwen-vl-cpu-image-processor",)
    summary = ("Qwen-VL video processors (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor) of "
               "every model use our fast twins after SGLang's own frame sampling and resize")
