"""Patch of ``sglang.srt.models.qwen2_5_vl`` (Qwen2.5-VL) for the encoder-DP input path.

sglang-qwen2-5-vl-encoder-dp-owner-only
    Why: up to 0.5.15.post1 (and still in 0.5.23), with ``--mm-enable-dp-encoder``,
    ``get_image_feature`` concatenates every image's pixel values on every TP rank (each rank
    first reconstructs every CUDA-IPC feature: TP8 x 4 images = 32 raw-feature copies, 4 used).
    How: as ``sglang-qwen3-vl-encoder-dp-owner-only``: under encoder DP, when every item holds
    raw patches (last dimension ``RAW_PATCH_DIM``, not the tower's embed dim: the release runs
    the tower only then, read from the proxy's metadata without copying), images go to
    ``run_dp_sharded_mrope_vision_model`` through ``load_local_pixel_values``; only the owner rank
    materializes an image and reconstructs a lazy IPC feature with the TP size as consumer count.
    Already-embedded features, videos, encoder DP off or the DP loader off: every rank
    reconstructs as the release does and the release's function runs unchanged.
    Upstream: none yet (sglang PR #31227, 0.5.16, did Kimi K2.5; 0.5.18 did Qwen3-VL only).
    Applies to: sglang 0.5.12 - 0.5.15.post1; 0.5.16+ (upstream deferral machinery) not covered.
"""

from __future__ import annotations

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from . import _switches
from ._owner import make_qwen_get_image_feature, uses_local_loader

QWEN2_5_VL = "sglang.srt.models.qwen2_5_vl"
MM_UTILS = "sglang.srt.multimodal.mm_utils"
CLASS = "Qwen2_5_VLForConditionalGeneration"
RAW_PATCH_DIM = 1176  # the release's ``raw_patch_dim`` in get_image_feature (3 * 2 * 14 * 14)


def _expected_dim(model) -> int:
    expected = getattr(model.visual, "embed_dim", -1)
    if expected == -1:
        conf = model.config.vision_config
        expected = getattr(conf, "embed_dim", getattr(conf, "hidden_size", -1))
    return expected


def tower_runs(model, width: int) -> bool:
    """The release runs the vision tower on 2-D features of this width (else passes through)."""
    return width == RAW_PATCH_DIM and width != _expected_dim(model)


@register
class Qwen25VlEncoderDpOwnerOnlyPatch(Patch):
    name = "sglang-qwen2-5-vl-encoder-dp-owner-only"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = QWEN2_5_VL
    modules = (QWEN2_5_VL,)
    upstream_pr = ""
    summary = "Qwen2.5-VL encoder DP: only the owner rank materializes/reconstructs an image"

    def upstream_equivalent(self) -> str | None:
        cls = getattr(module(QWEN2_5_VL), CLASS, None)
        if cls is not None and uses_local_loader(cls):
            return f"{CLASS} passes load_local_pixel_values to the DP sharding"
        return None

    def not_needed(self) -> str | None:
        if not hasattr(module(QWEN2_5_VL), "run_dp_sharded_mrope_vision_model"):
            return "Qwen2.5-VL has no encoder data parallelism in this release"
        return None

    def apply(self, ctx: PatchContext) -> None:
        qwen = module(QWEN2_5_VL)
        mm = module(MM_UTILS)
        require(qwen, CLASS, "run_dp_sharded_mrope_vision_model")
        model_cls = getattr(qwen, CLASS)
        current = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(model_cls, "get_image_feature",
                     make_qwen_get_image_feature(current, mm.__dict__, tower_runs))
        ctx.set_attr(_switches.SWITCHES, "qwen2_5_owner", True)
