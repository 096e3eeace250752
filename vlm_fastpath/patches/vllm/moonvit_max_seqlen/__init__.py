"""MoonViT computes ``max_seqlen`` and ``cu_seqlens`` once per encoder forward in vLLM.

Why: up to 0.22.x each of the 27 MoonViT blocks recomputes ``max_seqlen`` on the device and the
attention wrapper reads it back: 27 device-to-host syncs per forward, plus 4 ``tolist`` of the
device grid.
How: ``models_kimi_k25_vit`` reads the grid once, computes the host values once in
``MoonViT3dEncoder.forward`` and hands them to every block.
Upstream PR: none known; the change shipped in vLLM 0.23.0
(``MoonViT3dEncoder.prepare_encoder_metadata``).
Versions: vLLM >=0.15, open-ended; "upstream" on 0.23+.
Delete when: vLLM <0.23 is no longer supported.
"""

PATCH_MODULES = ("models_kimi_k25_vit",)
