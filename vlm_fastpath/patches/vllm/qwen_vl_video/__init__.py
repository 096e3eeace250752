"""Our Qwen-VL video processors in vLLM, for every model that holds transformers' (same bytes).

Why: vLLM preprocesses Qwen-VL videos with transformers' ``Qwen2VLVideoProcessor`` (Qwen2-VL,
Qwen2.5-VL, the Omni thinkers) or ``Qwen3VLVideoProcessor`` (Qwen3-VL, Qwen3.5, ColQwen3...): a
contiguous copy of the clip, torch's resize, float rescale and normalize, the odd-frame pad, a
10-D permute and a copy into patches, on a few threads. With ~30 frames that preprocessing
dominates a request (vllm#24728). Our twins (``qwen_integration.video_processor``) keep
transformers' own front end (kwargs, sampling, metadata) and give ``torch.equal``
``pixel_values_videos`` and ``video_grid_thw`` from one fused resize + LUT + temporal-pair
kernel on every core.
How: ``multimodal_processing_context`` wraps ``InputProcessingContext.get_hf_processor`` and
``.call_hf_processor``, stacked on the image patch's wrappers, which it requires (skipping or
reverting that patch takes this one along: both ride on the same attributes, whose originals
the image patch's revert promises back): the processor vLLM gets is a shallow copy whose
``video_processor`` is the twin (``patches.adapters.qwen_video_twin``, sharing the original's
settings), once ``check_video_compatible`` proved both equal on probe clips for those settings
(a model that changes them after loading, as D3 does, is probed again at its next call). Where
the processor is not one we mirror, a pixel method is not transformers' own, a probe differs or
vLLM preprocesses on a device, vLLM's code answers and the status says why, per model. A twin
answers with the original after a revert, and any unexpected fault in ours is contained (the
original answers; bad input is a ``ValueError``). Replaces the per-model patches
``vllm-qwen2-vl-video-processor``, ``vllm-qwen2-5-vl-video-processor`` and
``vllm-qwen3-vl-video-processor``.
Upstream PR: none (vLLM uses transformers' video processors for Qwen-VL).
Versions: vLLM >=0.22 with no upper bound, where the contract holds (the image patch's
structure clause; behaviour: the probes, per video processor class and settings).
Delete when: transformers' Qwen-VL video processors are within ~2x of ours on few cores
(re-measure with ``benchmarks.qwen_video``), or vLLM ships its own fused video processor.
"""

PATCH_MODULES = ("multimodal_processing_context",)
