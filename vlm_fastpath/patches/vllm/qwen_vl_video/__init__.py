"""Our Qwen2/2.5/3-VL video processors in vLLM, in place of transformers' (same bytes, faster).

Why: vLLM preprocesses Qwen-VL videos with transformers' ``Qwen2VLVideoProcessor`` (Qwen2-VL,
Qwen2.5-VL) or ``Qwen3VLVideoProcessor``: a contiguous copy of the clip, torch's resize, float
rescale and normalize, the odd-frame pad, a 10-D permute and a copy into patches, on a few
threads. With ~30 frames that preprocessing dominates a request (vllm#24728). Our twins
(``qwen_integration.video_processor``) keep transformers' own front end (kwargs, sampling,
metadata) and give ``torch.equal`` ``pixel_values_videos`` and ``video_grid_thw`` from one
fused resize + LUT + temporal-pair kernel on every core.
How: ``models`` wraps each model's ``ProcessingInfo.get_hf_processor``, stacked on the image
patch's wrapper, which it requires (skipping or reverting that patch takes this one along: both
ride on one attribute, whose original the image patch's skip promises back): the processor
vLLM gets is a shallow copy whose ``video_processor`` is the twin
(``patches.adapters.qwen_video_twin``), once ``check_video_compatible`` proved
both equal on probe clips in this process. ``get_video_processor``, ``_call_hf_processor``
and Qwen3-VL's per-video calls all go through it. Where the processor is not one we mirror,
a pixel method is not transformers' own, or a probe differs, vLLM's processor is handed out
and the status says why. A twin answers with the original after a revert, and any
unexpected fault in ours is contained (the original answers; bad input is a ``ValueError``).
Upstream PR: none (vLLM uses transformers' video processors for Qwen-VL).
Versions: vLLM >=0.22 with no upper bound, where the contract holds (structure:
``get_hf_processor(self, **kwargs)`` on the model's processing info; behaviour: the probes,
per video processor object, before its twin is handed out).
Delete when: transformers' Qwen-VL video processors are within ~2x of ours on few cores
(re-measure with ``benchmarks.qwen_video``), or vLLM ships its own fused video processor.
"""

PATCH_MODULES = ("models",)
