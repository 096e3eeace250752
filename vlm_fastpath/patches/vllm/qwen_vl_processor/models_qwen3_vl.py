"""vLLM ``vllm.model_executor.models.qwen3_vl``: Qwen3-VL hands out our image processor.

``Qwen3VLProcessingInfo`` defines its own ``get_hf_processor`` (a ``Qwen3VLProcessor``, whose
image processor is transformers' Qwen2-VL one with Qwen3-VL's constants, patch 16, read from
the checkpoint); wrapped like Qwen2-VL's (see ``models_qwen2_vl``). Its video processor
(``Qwen3VLVideoProcessor``) stays the engine's.
"""

from __future__ import annotations

from ...core.registry import register
from .models_qwen2_vl import QwenProcessingInfoPatch

QWEN3_VL = "vllm.model_executor.models.qwen3_vl"


@register
class Qwen3VLProcessorPatch(QwenProcessingInfoPatch):
    name = "vllm-qwen3-vl-processor"
    trigger = QWEN3_VL
    modules = (QWEN3_VL,)
    info_class = "Qwen3VLProcessingInfo"
    summary = "Qwen3-VL images use FastQwen2VLImageProcessor (torch.equal, faster)"
