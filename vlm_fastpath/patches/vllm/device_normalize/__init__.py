"""Kimi pixels cross to EngineCore as uint8 and are normalized on the model's device.

Why: up to 0.31 the normalized float tensor (4x the uint8 bytes) crosses the API-server ->
EngineCore boundary for every Kimi request.
How: ``models_kimi_k25`` wraps ``KimiK25ProcessingInfo.get_hf_processor`` (uint8 out of our
processor) and the model's ``__init__``/``_parse_and_validate_media_input`` (exact lookup-table
normalization on the device). It requires one of our processor patches (data: ``requires_any``).
Upstream PR: vllm-project/vllm#50411 (``mm_device_do_normalize``; Kimi in 0.32.0).
Versions: vLLM >=0.19, open-ended; "upstream" on 0.32+ (0.15-0.18 keep the processor as
``media_processor``: nothing to swap, and no processor patch of ours applies).
Delete when: vLLM <0.32 is no longer supported.
"""

PATCH_MODULES = ("models_kimi_k25",)
