"""Deferred preprocessing: ship uint8 pixels to the vision owner and preprocess there.

Why: the tokenizer process turns every image into float32 ``pixel_values`` (about 4x the uint8
bytes) and pickles them to the scheduler.
How: a sender half (``multimodal_processors_kimi_k25``/``multimodal_processors_kimi_k3``) ships
each image in its smallest exact form; an owner half (``models_kimi_k25``/``models_kimi_k3``)
wraps ``get_image_feature`` on top of the encoder-DP and ``max_seqlen`` wrappers (data:
``after``) and materializes the exact ``pixel_values`` lazily on the tower's device.
``VLM_FASTPATH_DEFER`` = auto/0/1. ``_shared`` holds what both halves agree on.
Upstream PR: sgl-project/sglang#33921 (Kimi K3 only, 0.5.18); Kimi K2.5 is beyond upstream.
Versions: sglang >=0.5.17 open-ended for K3 ("upstream" from 0.5.18); K2.5 >=0.5.12.
Upper bound kept (<0.5.23): ``sglang-kimi-k25-deferred-sender`` and
``sglang-kimi-k25-deferred-owner``: 0.5.23 preprocesses K2.5 on the GPU by default and its
items are reshaped by the artifact cache; the sweep has not run the deferral there yet (to lift
with a contract once it has).
Delete when: upstream defers K2.5 too and sglang <0.5.18 is no longer supported.
"""

PATCH_MODULES = (
    "multimodal_processors_kimi_k25",
    "models_kimi_k25",
    "multimodal_processors_kimi_k3",
    "models_kimi_k3",
)
