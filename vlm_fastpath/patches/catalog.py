"""Every patch module, by engine. Listed explicitly so discovery imports nothing else."""

from __future__ import annotations

PATCH_MODULES: tuple[str, ...] = (
    # vLLM
    "vlm_fastpath.patches.vllm.transformers_utils_processor",
    "vlm_fastpath.patches.vllm.models_kimi_k25",
    "vlm_fastpath.patches.vllm.processors_kimi_k25_vision_fused",
)

# SGLang (vlm_fastpath/patches/sglang/, one module per patched upstream module)
PATCH_MODULES += (
    "vlm_fastpath.patches.sglang.managers_mm_utils",
    "vlm_fastpath.patches.sglang.layers_attention_vision",
    "vlm_fastpath.patches.sglang.models_kimi_k25",
    "vlm_fastpath.patches.sglang.multimodal_processors_kimi_k25",
)
