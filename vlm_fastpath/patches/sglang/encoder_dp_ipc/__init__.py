"""Encoder data parallelism without redundant copies: owner-rank-only materialization and
deferred CUDA-IPC reconstruction with consumer counting, plus the batched same-shape Kimi resize
(the backport of sglang #31227, with #31212's attention-TP-size-1 fix folded in).

Why: up to 0.5.15.post1, under ``--mm-enable-dp-encoder``, every TP rank reconstructs every
CUDA-IPC feature and copies every image to its GPU although each image runs on one rank
(TP8 x 4 images: 32 raw-feature copies, 4 used); at attention-TP size 1 the release's DP helper
calls MoonViT with a keyword it does not take; and the Kimi GPU preprocessing launches one
bicubic resize per image.
How, one module per patched upstream module, in apply order:
``utils_cuda_ipc_transport_utils`` (consumer counts on the proxy), ``managers_schedule_batch``
(lazy items, ``reconstruct(ipc_consumer_count=)``), ``multimodal_mm_utils`` (the DP loader;
MoonViT at attention-TP size 1), ``models_kimi_k25`` (Kimi owner-only ``get_image_feature``),
``managers_mm_utils`` (cache hits release their slot, once no later chunk can read it),
``multimodal_processors_base_processor`` (the deferral markers), ``models_qwen2_5_vl``/
``models_qwen3_vl`` (the same for Qwen; beyond upstream), ``multimodal_processors_kimi_k25``
(one interpolate per source shape). An item stays lazy only when every piece that consumes or
releases it is active (``_switches``).
Upstream contracts kept: proxies are recognized by ``isinstance`` of the release's
``CudaIpcTensorTransportProxy`` (duck typing only for other objects); 0.5.16's names
(``DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY`` on the transport and schedule_batch modules,
``materialize_multimodal_features``, ``_resize_images_by_source_shape``, ``rope_2d_packed``,
``acknowledge_consumption``, ``_consumer_acknowledged``), exception types and messages.
Stricter than upstream, on purpose: the scheduler leaves a marked item lazy only when its own
published server args say ``mm_enable_dp_encoder``. The model decides the same way
(``use_data_parallel`` is read from the scheduler's server args when the model is built), and
only its encoder-DP branch materializes lazy features. A marker alone (set by a tokenizer
process with other settings, a client-built item, a test) would otherwise hand the proxy to the
release's non-DP ``get_image_feature``, which concatenates ``item.feature`` directly (a
TypeError that fails the batch on 0.5.12 - 0.5.15), and on 0.5.16+ would have every TP rank
acknowledge the full TP size (a flag of tp*tp that the recycler, waiting for exactly tp, never
frees). Without published server args nothing is deferred.
Known limit (as upstream): a lazy item whose request is aborted before its last chunk is never
released; the slot returns only with the pool.
Upstream PR: sgl-project/sglang#31227 (0.5.16; Kimi K2.5 only; Qwen3-VL in 0.5.18).
Versions: sglang >=0.5.12, open-ended upward: "upstream" from 0.5.16 (#31227).
Upper bound kept (<0.5.16): ``sglang-qwen-vl-defer-ipc-marker``,
``sglang-qwen2-5-vl-encoder-dp-owner-only`` and ``sglang-qwen3-vl-encoder-dp-owner-only``: on
0.5.16-0.5.17 (the marker, Qwen3-VL) and from 0.5.16 (Qwen2.5-VL) the code they wrap changed in
ways no detector of ours tells apart from "needs the backport" yet.
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
    "multimodal_processors_kimi_k25",
)
