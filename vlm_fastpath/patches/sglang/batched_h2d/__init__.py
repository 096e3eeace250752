"""One batched (pinned, non-blocking) host-to-device copy of the features before the tower.

Why: up to 0.5.17 SGLang copies each multimodal item's feature to the GPU on its own, from
pageable memory (effectively synchronous), although Kimi K2.5/K3 and Qwen2.5/3/3.5-VL concatenate
them right after; 0.5.12 also counts expanded items with one ``.item()`` per grid row.
How: ``managers_mm_utils`` stages every host feature of a batched-feature model in one pinned
buffer and makes one copy (``sglang-batched-feature-h2d``), and vectorizes the grid counts
(``sglang-vectorized-mm-grid-counts``).
Upstream PR: sgl-project/sglang#26167 (0.5.13; the skip list grew in 0.5.16 and 0.5.18).
Versions: sglang >=0.5.12 open-ended for ``sglang-vectorized-mm-grid-counts`` ("upstream" from
0.5.13). Upper bound kept (<0.5.18): ``sglang-batched-feature-h2d``: 0.5.18-0.5.20 moved the
call sites to mm_schedule, and no detector of ours tells that code apart yet.
Delete when: sglang <0.5.18 is no longer supported.
"""

PATCH_MODULES = ("managers_mm_utils",)
