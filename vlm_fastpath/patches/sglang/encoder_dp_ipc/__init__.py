"""Encoder data parallelism without redundant copies: owner-rank-only materialization and
deferred CUDA-IPC reconstruction with consumer counting (the backport of sglang #31227).

Why: up to 0.5.15.post1, under ``--mm-enable-dp-encoder``, every TP rank reconstructs every
CUDA-IPC feature and copies every image to its GPU although each image runs on one rank
(TP8 x 4 images: 32 raw-feature copies, 4 used).
How, one module per patched upstream module, in apply order:
``utils_cuda_ipc_transport_utils`` (consumer counts on the proxy), ``managers_schedule_batch``
(lazy items, ``reconstruct(ipc_consumer_count=)``), ``multimodal_mm_utils`` (the DP loader),
``models_kimi_k25`` (Kimi owner-only ``get_image_feature``), ``managers_mm_utils`` (cache hits
release their slot), ``multimodal_processors_base_processor`` (the deferral markers),
``models_qwen2_5_vl``/``models_qwen3_vl`` (the same for Qwen; beyond upstream). An item stays
lazy only when every piece that consumes or releases it is active (``_switches``).
Upstream PR: sgl-project/sglang#31227 (0.5.16; Kimi K2.5 only; Qwen3-VL in 0.5.23).
Versions: sglang >=0.5.12,<0.5.16.
Delete when: sglang <0.5.16 is no longer supported and upstream covers Qwen2.5-VL.
"""

PATCH_MODULES = (
    "utils_cuda_ipc_transport_utils",
    "managers_schedule_batch",
    "multimodal_mm_utils",
    "models_kimi_k25",
    "managers_mm_utils",
    "multimodal_processors_base_processor",
    "models_qwen2_5_vl",
    "models_qwen3_vl",
)
