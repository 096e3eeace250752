"""Our fused Kimi K2.5 processor on SGLang's CPU preprocessing path.

Why: without a GPU in the tokenizer process SGLang preprocesses Kimi K2.5 images with the
checkpoint's numpy float64 pipeline (~1.4 s per 8 images of 2048x2048 on two cores).
How: ``multimodal_processors_kimi_k25`` gives ``KimiGPUProcessorWrapper`` a
``FusedKimiProcessor`` built from the same config (byte-identical output); the GPU path is
untouched.
Upstream PR: none in SGLang (the same idea is vllm-project/vllm#47416).
Versions: sglang >=0.5.12 with no upper bound: applies where its contract holds (structure:
``KimiGPUProcessorWrapper.__init__(self, hf_processor, ...)``; behaviour: ours equals the
checkpoint's media processor on ``patches.kimi_probe``'s probes before it replaces it). 0.5.23
preprocesses K2.5 on the GPU by default; its ``_cpu_call`` is the path without CUDA or with
``SGLANG_FORCE_CPU_IMAGE_PREPROCESSING``.
Delete when: SGLang ships a fast CPU Kimi processor of its own.
"""

PATCH_MODULES = ("multimodal_processors_kimi_k25",)
