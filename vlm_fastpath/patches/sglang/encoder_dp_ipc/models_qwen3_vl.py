"""Patch of ``sglang.srt.models.qwen3_vl`` (Qwen3-VL, and Qwen3-VL-MoE, which inherits its
``get_image_feature``) for the encoder-DP input path.

sglang-qwen3-vl-encoder-dp-owner-only
    Why: up to 0.5.15.post1, with ``--mm-enable-dp-encoder``, ``get_image_feature`` concatenates
    every image's pixel values on every TP rank (each rank first reconstructs every CUDA-IPC
    feature: TP8 x 4 images = 32 raw-feature copies, 4 used), then keeps the ones it owns.
    How: under encoder DP, images go to ``run_dp_sharded_mrope_vision_model`` through
    ``load_local_pixel_values`` (``sglang-encoder-dp-local-loader``): only the owner rank
    materializes an image (one casting copy into one buffer) and reconstructs a lazy CUDA-IPC
    feature with the TP size as consumer count (``sglang-ipc-consumer-count``); the grid stays on
    the host. Every rank marks the items as accounted for, so a later embedding-cache hit does
    not release them again. Items are left lazy only when the Qwen-VL processor marked them
    (``sglang-qwen-vl-defer-ipc-marker``) and this wrapper is in place. Videos, features that are
    not 2-D, encoder DP off or the DP loader off: the release's function runs unchanged.
    Upstream: sglang PR #31227 (0.5.16) did Kimi K2.5 only; Qwen3-VL loads owner-only upstream
    from 0.5.18 (``_get_visual_feature``), not yet in 0.5.16 - 0.5.17.
    Applies to: sglang 0.5.12 - 0.5.15.post1; "upstream" where ``get_image_feature`` already
    passes ``load_local_pixel_values`` (0.5.18+); 0.5.16 - 0.5.17 (upstream deferral machinery,
    Qwen not wired) are not covered.
"""

from __future__ import annotations

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from . import _switches
from ._owner import make_qwen_get_image_feature, uses_local_loader

QWEN3_VL = "sglang.srt.models.qwen3_vl"
MM_UTILS = "sglang.srt.multimodal.mm_utils"
CLASS = "Qwen3VLForConditionalGeneration"


@register
class Qwen3VlEncoderDpOwnerOnlyPatch(Patch):
    name = "sglang-qwen3-vl-encoder-dp-owner-only"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = QWEN3_VL
    modules = (QWEN3_VL,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "Qwen3-VL encoder DP: only the owner rank materializes/reconstructs an image"

    def upstream_equivalent(self) -> str | None:
        cls = getattr(module(QWEN3_VL), CLASS, None)
        if cls is not None and uses_local_loader(cls):
            return f"{CLASS} passes load_local_pixel_values to the DP sharding"
        return None

    def not_needed(self) -> str | None:
        if not hasattr(module(QWEN3_VL), "run_dp_sharded_mrope_vision_model"):
            return "Qwen3-VL has no encoder data parallelism in this release"
        return None

    def apply(self, ctx: PatchContext) -> None:
        qwen = module(QWEN3_VL)
        mm = module(MM_UTILS)
        require(qwen, CLASS, "run_dp_sharded_mrope_vision_model")
        model_cls = getattr(qwen, CLASS)
        current = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(model_cls, "get_image_feature",
                     make_qwen_get_image_feature(current, mm.__dict__))
        ctx.set_attr(_switches.SWITCHES, "qwen3_owner", True)
