"""vLLM ``vllm.model_executor.models.qwen2_5_vl``: Qwen2.5-VL hands out our image processor.

``Qwen2_5_VLProcessingInfo`` defines its own ``get_hf_processor`` (a ``Qwen2_5_VLProcessor``);
it is wrapped like Qwen2-VL's (see ``models_qwen2_vl``).
"""

from __future__ import annotations

from ...core.registry import register
from .models_qwen2_vl import QwenProcessingInfoPatch

QWEN2_5_VL = "vllm.model_executor.models.qwen2_5_vl"


@register
class Qwen25VLProcessorPatch(QwenProcessingInfoPatch):
    name = "vllm-qwen2-5-vl-processor"
    trigger = QWEN2_5_VL
    modules = (QWEN2_5_VL,)
    info_class = "Qwen2_5_VLProcessingInfo"
    summary = "Qwen2.5-VL images use FastQwen2VLImageProcessor (torch.equal, faster)"
