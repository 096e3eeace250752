"""Which engine-suite tests prove each patch's behaviour: the sweep runs them where it applies.

Each entry names tests of tests/engines/<engine>/ that compare outputs with and without the
patch (``torch.equal``) or count the host-to-device copies / device syncs / IPC copies the patch
exists for. On a release where none of a patch's tests' patches is ``applied`` they are not run
(the status check already covers ``upstream``/``unsupported-version``). The anchor releases
run the whole suite instead. tests/test_sweep_data.py checks every patch has an entry and every
named test exists.
"""

from __future__ import annotations

_KIMI_VLLM = (
    "test_kimi_processor.py::test_processing_info_hands_out_ours",
    "test_kimi_processor.py::test_outputs_equal_reference",
)
_QWEN_VLLM = (
    "test_qwen_processor.py::test_engine_hands_out_ours_and_outputs_are_equal",
    "test_qwen_processor.py::test_float32_and_device_normalize_paths",
    # one model that defines its own get_hf_processor (the full list runs on the anchors)
    "test_qwen_reach.py::test_every_model_holding_the_image_processor_gets_ours[qwen2.5-omni]",
    "test_qwen_reach.py::test_settings_changed_after_hand_out_are_followed",
)
_QWEN_VIDEO_VLLM = (
    "test_qwen_video_processor.py::test_engine_hands_out_ours_and_outputs_are_equal",
    "test_qwen_video_processor.py::test_float32_and_device_normalize",
    "test_qwen_reach.py::test_every_model_holding_the_video_processor_gets_ours[qwen2.5-omni]",
)
_IPC_KIMI = (
    "test_ipc_deferral.py::test_thousand_requests_owner_only_and_every_slot_released_once",
    "test_ipc_deferral.py::test_tp_by_images_copy_counts",
)
_IPC_QWEN = (
    "test_ipc_deferral_qwen.py::test_requests_owner_only_and_every_slot_released_once",
    "test_ipc_deferral_qwen.py::test_tp_by_images_copy_counts",
)

BEHAVIOUR: dict[str, tuple[str, ...]] = {
    # vLLM
    "vllm-processor-cls-overrides": _KIMI_VLLM,
    "vllm-kimi-processor": _KIMI_VLLM,
    "vllm-kimi-fused-processor": (
        *_KIMI_VLLM, "test_kimi_processor.py::test_equals_vllm_fused_processor"),
    "vllm-kimi-device-normalize": (
        "test_device_normalize.py::test_tower_receives_what_the_release_gives_it",
        "test_device_normalize.py::test_payload_bytes",
    ),
    "vllm-moonvit-max-seqlen": ("test_moonvit_syncs.py::test_syncs_before_and_after",),
    "vllm-image-loader-client-errors": (
        "test_image_loader.py::test_every_bad_image_is_a_value_error",
        "test_image_loader.py::test_good_image_is_the_releases",
    ),
    "vllm-fast-image-decode": (
        "test_fast_image_decode.py::test_load_bytes_is_the_releases",
        "test_fast_image_decode.py::test_bad_input_is_the_releases",
    ),
    "vllm-threaded-mm-hash": (
        "test_threaded_mm_hash.py::test_digest_is_the_releases",
        "test_threaded_mm_hash.py::test_only_large_items_get_threads",
    ),
    "vllm-vision-chunk-hash-bytes": (
        "test_vision_chunk_hash.py::test_key_is_vllms_key_for_the_file",
        "test_vision_chunk_hash.py::test_hashing_reads_the_file_not_the_pixels",
        "test_vision_chunk_hash.py::test_same_file_same_key_other_file_or_setting_other_key",
    ),
    "vllm-qwen-vl-image-processor": _QWEN_VLLM,
    "vllm-qwen-vl-video-processor": _QWEN_VIDEO_VLLM,
    "vllm-qwen-compact-image-rows": (
        "test_qwen_compact.py::test_api_server_sends_compact_rows_that_expand_to_vllms_own",
        "test_qwen_compact.py::test_without_the_expansion_the_full_rows_are_sent",
    ),
    "vllm-qwen-compact-mixed-batch": (
        "test_qwen_compact.py::test_a_batch_mixing_compact_and_full_rows_is_not_padded",
    ),
    "vllm-qwen2-vl-compact-rows": (
        "test_qwen_compact.py::test_tower_embeddings_equal_from_compact_rows",
    ),
    "vllm-qwen2-5-vl-compact-rows": (
        "test_qwen_compact.py::test_tower_embeddings_equal_from_compact_rows",
        "test_qwen_compact.py::test_encoder_data_parallel_path_expands",
    ),
    "vllm-qwen3-vl-compact-rows": (
        "test_qwen_compact.py::test_tower_embeddings_equal_from_compact_rows",
    ),
    # SGLang
    "sglang-batched-feature-h2d": ("test_mm_utils_h2d.py",),
    "sglang-vectorized-mm-grid-counts": ("test_grid_counts.py",),
    "sglang-vision-host-max-seqlen": ("test_moonvit_syncs.py",),
    "sglang-moonvit-max-seqlen-once": ("test_moonvit_syncs.py",),
    "sglang-moonvit-sdpa-host-cu-seqlens": (
        "test_moonvit_sdpa_syncs.py::test_sdpa_syncs_before_and_after",
    ),
    "sglang-ipc-consumer-count": _IPC_KIMI,
    "sglang-ipc-deferred-reconstruction": _IPC_KIMI,
    "sglang-encoder-dp-local-loader": _IPC_KIMI,
    "sglang-kimi-k25-encoder-dp-owner-only": _IPC_KIMI,
    "sglang-ipc-cache-hit-release": _IPC_KIMI,
    "sglang-kimi-k25-defer-ipc-marker": _IPC_KIMI,
    "sglang-qwen-vl-defer-ipc-marker": _IPC_QWEN,
    "sglang-qwen2-5-vl-encoder-dp-owner-only": _IPC_QWEN,
    "sglang-qwen3-vl-encoder-dp-owner-only": _IPC_QWEN,
    "sglang-kimi-k25-batched-same-shape-resize": (
        "test_encoder_dp_resize.py::test_four_same_shape_images_share_one_interpolate",
    ),
    "sglang-kimi-k25-fused-cpu-processor": ("test_kimi_processor.py",),
    "sglang-fast-image-decode": (
        "test_fast_image_decode.py::test_load_image_is_the_releases",
        "test_fast_image_decode.py::test_bad_input_is_the_releases",
    ),
    "sglang-kimi-k25-deferred-sender": (
        "test_deferred_kimi_k25.py::test_tower_receives_eager_pixels",
        "test_deferred_kimi_k25.py::test_payload_bytes_4x1536x1024",
    ),
    "sglang-kimi-k25-deferred-owner": (
        "test_deferred_kimi_k25.py::test_tower_receives_eager_pixels",
    ),
    "sglang-kimi-k3-deferred-sender": (
        "test_deferred_kimi_k3.py::test_tower_receives_eager_pixels",
        "test_deferred_kimi_k3.py::test_payload_bytes_4x1536x1024",
    ),
    "sglang-kimi-k3-deferred-owner": (
        "test_deferred_kimi_k3.py::test_tower_receives_eager_pixels",),
    "sglang-qwen-vl-cpu-image-processor": (
        "test_qwen_processor.py::test_cpu_path_uses_ours_with_equal_outputs",
        "test_qwen_reach.py::test_every_model_holding_the_image_processor_gets_ours[dots-ocr]",
        "test_qwen_reach.py::test_worker_pool_clones_serve_qwen_images_with_ours",
    ),
    "sglang-qwen-vl-cpu-video-processor": (
        "test_qwen_video_processor.py::test_video_request_uses_ours_with_equal_outputs",
        "test_qwen_reach.py::test_worker_pool_clones_serve_qwen_videos_with_ours",
    ),
    "sglang-qwen-compact-image-rows": (
        "test_qwen_compact.py::test_tokenizer_sends_compact_rows_the_model_reads_as_full",
        "test_qwen_compact.py::test_full_rows_where_the_model_does_not_expand",
        "test_qwen_compact.py::test_image_artifacts_are_compact_too",
    ),
    "sglang-qwen2-vl-compact-rows": (
        "test_qwen_compact.py::test_compact_items_give_the_full_rows_embeddings[qwen2_vl]",
    ),
    "sglang-qwen2-5-vl-compact-rows": (
        "test_qwen_compact.py::test_compact_items_give_the_full_rows_embeddings[qwen2_5_vl]",
        "test_qwen_compact.py::test_precomputed_embeddings_of_that_width_are_left_alone",
    ),
    "sglang-qwen3-vl-compact-rows": (
        "test_qwen_compact.py::test_compact_items_give_the_full_rows_embeddings[qwen3_vl]",
        "test_qwen_compact.py::test_compact_items_give_the_full_rows_embeddings[qwen3_vl_moe]",
    ),
}


# Behaviour tests that cannot run on a release yet because the test harness (not the patch)
# uses a private engine API the release changed: {(engine, release): {node: why}}. The sweep
# prints each as a gap on its line; every entry is an open task, not a pass. Status,
# apply/revert and VLM_FASTPATH=0 still run. None at present (the device-normalize harness
# calls each release's own HF-processor entry, 0.29-0.31 included).
KNOWN_GAPS: dict[tuple[str, str], dict[str, str]] = {}


def tests_for(engine: str, applied: list[str], release: str = "") -> list[str]:
    """pytest node ids (relative to the repository root) for the applied patches, deduplicated,
    without the release's known harness gaps (``gaps_for``)."""
    gaps = KNOWN_GAPS.get((engine, release), {})
    out: list[str] = []
    for name in applied:
        for node in BEHAVIOUR.get(name, ()):
            path = f"tests/engines/{engine}/{node}"
            if node not in gaps and path not in out:
                out.append(path)
    return out


def gaps_for(engine: str, applied: list[str], release: str) -> list[str]:
    """The applied patches' behaviour tests this release cannot run yet (see KNOWN_GAPS)."""
    gaps = KNOWN_GAPS.get((engine, release), {})
    nodes = {node for name in applied for node in BEHAVIOUR.get(name, ())}
    return sorted(node for node in gaps if node in nodes)
