"""Our Kimi K2.5/K2.6 processor in vLLM, in place of the checkpoint's or vLLM's fused one.

Why: before 0.25 vLLM preprocesses Kimi images with the checkpoint's remote-code processor
(per-image numpy pad/normalize/patchify); 0.25-0.33 ship ``KimiK25FusedVisionProcessor``, whose
element-wise numba kernel only pays off with many cores. ``FusedKimiProcessor`` gives the same
bytes, 4-5x faster on 2 cores.
How: ``transformers_utils_processor`` gives ``get_image_processor`` the
``processor_cls_overrides`` argument of 0.25+ (0.19-0.24); ``models_kimi_k25`` makes
``KimiK25ProcessingInfo`` load our processor (0.19-0.24); ``processors_kimi_k25_vision_fused``
rebinds vLLM's fused class to ours (0.25+). ``patches.adapters.kimi_vision`` is the
``BaseImageProcessor`` shape vLLM expects around ``FusedKimiProcessor``.
Upstream PR: vllm-project/vllm#47416 (the fused processor and the override argument, 0.25.0).
Versions: vLLM >=0.19 for the override and loader (0.15-0.18 call the processor's
``split_video_chunks``, which ours lacks; 0.25+ have both upstream), >=0.25 with no upper bound
for the fused-class replacement, which applies where its contract holds
(``patches.adapters.kimi_probe``: ours equals vLLM's fused processor on probe images before it is
handed out).
Delete when: the override patches once vLLM <0.25 is no longer supported; the replacement once
vLLM's own processor is as fast as ours on few cores (re-measure with ``vlm-fastpath bench``).
"""

PATCH_MODULES = (
    "transformers_utils_processor",
    "models_kimi_k25",
    "processors_kimi_k25_vision_fused",
)
