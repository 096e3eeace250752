"""Every patch folder, by engine, in the order they must apply.

Each folder implements one upstream change and lists its modules (``PATCH_MODULES``) in its
``__init__``; dependencies across folders are data on the patches (``after``/``requires``),
checked by the registry. Listed explicitly so discovery imports nothing else.
"""

from __future__ import annotations

import importlib

PATCH_FOLDERS: tuple[str, ...] = (
    "vlm_fastpath.patches.vllm.kimi_processor",
    "vlm_fastpath.patches.vllm.device_normalize",
    "vlm_fastpath.patches.vllm.moonvit_max_seqlen",
    "vlm_fastpath.patches.vllm.image_loader",
    "vlm_fastpath.patches.vllm.qwen_vl_processor",
    "vlm_fastpath.patches.vllm.qwen_vl_video",
    "vlm_fastpath.patches.vllm.fast_image_decode",
    "vlm_fastpath.patches.vllm.threaded_mm_hash",
    "vlm_fastpath.patches.vllm.vision_chunk_hash",
    "vlm_fastpath.patches.vllm.qwen_compact_images",
    "vlm_fastpath.patches.sglang.batched_h2d",
    "vlm_fastpath.patches.sglang.vision_max_seqlen",
    "vlm_fastpath.patches.sglang.encoder_dp_ipc",
    "vlm_fastpath.patches.sglang.kimi_cpu_processor",
    "vlm_fastpath.patches.sglang.deferred_preprocessing",
    "vlm_fastpath.patches.sglang.qwen_vl_processor",
    "vlm_fastpath.patches.sglang.qwen_vl_video",
    "vlm_fastpath.patches.sglang.fast_image_decode",
    "vlm_fastpath.patches.sglang.qwen_compact_images",
)


def patch_modules(folder: str) -> tuple[str, ...]:
    """The patch modules of one folder, in the order its ``__init__`` lists them."""
    package = importlib.import_module(folder)
    return tuple(f"{folder}.{name}" for name in getattr(package, "PATCH_MODULES", ()))
