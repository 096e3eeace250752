"""MoonViT's ``max_seqlen`` and ``cu_seqlens`` computed once per forward, on the host.

Why: up to 0.5.15.post1 each of MoonViT's 27 attention blocks recomputes ``max_seqlen`` from the
device ``cu_seqlens`` (``.item()``) and the tower reads its device grid back three times: 30
device-to-host syncs per forward (SDPA: ``cu_seqlens.cpu().tolist()`` per block).
How: ``models_kimi_k25`` keeps the grid on the host and computes ``HostMaxSeqlen`` once
(``sglang-moonvit-max-seqlen-once``) and publishes the host grid for SDPA
(``sglang-moonvit-sdpa-host-cu-seqlens``, which requires the first); ``layers_attention_vision``
makes the backends use those host values (``sglang-vision-host-max-seqlen``).
Upstream PR: sgl-project/sglang#30878 (+#31227), 0.5.16; SDPA's per-block read-back is still
upstream in 0.5.23. 0.5.16 computes ``max_seqlen`` once but still copies ``grid_thws`` to the
device (5 syncs per forward: 3 ``tolist``, 2 ``item``); 0.5.17 keeps it on the host (0).
Versions: sglang >=0.5.12, open-ended upward ("upstream" from 0.5.16).
Upper bound kept (<0.5.16): ``sglang-moonvit-sdpa-host-cu-seqlens``: 0.5.16+ restructured the
SDPA mask (still a per-block host read there, a known gap) and no detector of ours tells that
code apart yet.
Delete when: sglang <0.5.16 is no longer supported.
"""

PATCH_MODULES = ("layers_attention_vision", "models_kimi_k25")
