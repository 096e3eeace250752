"""Every patch module, by engine. Listed explicitly so discovery imports nothing else."""

from __future__ import annotations

PATCH_MODULES: tuple[str, ...] = (
    # vLLM
    "vlm_fastpath.patches.vllm.transformers_utils_processor",
    "vlm_fastpath.patches.vllm.models_kimi_k25",
    "vlm_fastpath.patches.vllm.processors_kimi_k25_vision_fused",
    # uint8 transport + device-side normalization (issue 5); after the processor patches,
    # whose status it checks
    "vlm_fastpath.patches.vllm.models_kimi_k25_device_normalize",
    # MoonViT max_seqlen once per encoder forward on vLLM <= 0.22 (issue 3 item 4)
    "vlm_fastpath.patches.vllm.models_kimi_k25_vit",
)

# SGLang (vlm_fastpath/patches/sglang/, one module per patched upstream module)
PATCH_MODULES += (
    "vlm_fastpath.patches.sglang.managers_mm_utils",
    "vlm_fastpath.patches.sglang.layers_attention_vision",
    "vlm_fastpath.patches.sglang.models_kimi_k25",
    "vlm_fastpath.patches.sglang.models_kimi_k25_sdpa",  # wraps the encoder forward above
    "vlm_fastpath.patches.sglang.multimodal_processors_kimi_k25",
    # deferred CUDA-IPC reconstruction under encoder DP (issue 4 item 4); the Kimi one wraps
    # the get_image_feature above and is itself wrapped by the deferred-preprocessing owner
    "vlm_fastpath.patches.sglang.utils_cuda_ipc_transport_utils",
    "vlm_fastpath.patches.sglang.managers_schedule_batch",
    "vlm_fastpath.patches.sglang.multimodal_mm_utils",
    "vlm_fastpath.patches.sglang.models_kimi_k25_encoder_dp",
    "vlm_fastpath.patches.sglang.managers_mm_utils_ipc",
    "vlm_fastpath.patches.sglang.multimodal_processors_base_processor",
    # the same for Qwen2.5-VL / Qwen3-VL(-MoE) on 0.5.12 - 0.5.15.post1
    "vlm_fastpath.patches.sglang.models_qwen2_5_vl_encoder_dp",
    "vlm_fastpath.patches.sglang.models_qwen3_vl_encoder_dp",
    # deferred preprocessing (issue 5); after the modules above so it wraps their methods
    "vlm_fastpath.patches.sglang.models_kimi_k25_deferred",
    "vlm_fastpath.patches.sglang.multimodal_processors_kimi_k25_deferred",
    # Kimi K3 deferred preprocessing on 0.5.17 (upstream from 0.5.18, sglang #33921)
    "vlm_fastpath.patches.sglang.models_kimi_k3_deferred",
    "vlm_fastpath.patches.sglang.multimodal_processors_kimi_k3_deferred",
)
