"""The image settings the public checkpoints ship (``preprocessor_config.json``), as published.

One home for them: ``vlm-fastpath bench`` runs on them, and the tests and benchmarks in the
repository import them from here rather than keeping copies.
"""

from __future__ import annotations

from typing import Any

# Kimi K2.5/K2.6 ``media_proc_cfg`` as shipped in the checkpoint's preprocessor_config.json.
KIMI_K25_MEDIA_CFG: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": [2, 2],
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "temporal_merge_kernel_size": 4,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}

# Qwen2.5-VL's preprocessor_config.json (the checkpoint's limits, not transformers' defaults).
QWEN25_VL_CFG: dict[str, Any] = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}

# Qwen3-VL's image and video settings (patch 16, mean/std 0.5), as its checkpoints ship them.
QWEN3_VL_CFG: dict[str, Any] = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
QWEN3_VL_VIDEO_CFG: dict[str, Any] = {
    "size": {"shortest_edge": 4096, "longest_edge": 25165824},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "video_processor_type": "Qwen3VLVideoProcessor",
    "processor_class": "Qwen3VLProcessor",
}
