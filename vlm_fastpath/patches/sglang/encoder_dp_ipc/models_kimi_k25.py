"""Patch of ``sglang.srt.models.kimi_k25`` (Kimi K2.5/K2.7) for the encoder-DP input path.

Kept apart from ``models_kimi_k25.py`` (the MoonViT ``max_seqlen`` patch of the same module) so
each can be reported and disabled on its own; this one wraps whatever ``get_image_feature`` is
in place and replaces only its encoder-DP branch.

sglang-kimi-k25-encoder-dp-owner-only
    Why: up to 0.5.15.post1, with ``--mm-enable-dp-encoder``, ``get_image_feature`` concatenates
    every image and copies it to the GPU on every TP rank (TP8 x 4 images: 32 raw-feature copies,
    4 used), and moves ``grid_thws`` to the GPU only to read it back with ``.tolist()``.
    How: under encoder DP the grid stays on the host and the images go to
    ``run_dp_sharded_mrope_vision_model`` through ``load_local_pixel_values``
    (``sglang-encoder-dp-local-loader``): only the owner rank materializes an image, with one
    casting copy into one buffer, and reconstructs a lazy CUDA-IPC feature with the TP size as
    consumer count so the pool slot is recycled (``sglang-ipc-consumer-count``). Every rank marks
    the items as accounted for, so a later embedding-cache hit does not release them again.
    The call uses 0.5.16's contract (``rope_type="rope_2d_packed"``, pixel values ``None``, a
    loader), which the DP loader also honours at attention-TP size 1.
    Without encoder DP, or if the DP loader is off, the wrapped function runs unchanged.
    Upstream: sglang PR #31227, released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MultimodalDataItem`` has ``can_defer_cuda_ipc_feature_reconstruction``.
"""

from __future__ import annotations

import functools

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register
from .._common import module, require
from . import _switches
from ._owner import host_grid_rows as _host_grid_rows
from ._owner import make_local_loader

KIMI_K25 = "sglang.srt.models.kimi_k25"
MM_UTILS = "sglang.srt.multimodal.mm_utils"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"


def _make_get_image_feature(current, kimi_g, mm_g):
    # No fallback: once an item is settled or its IPC slot read, a second run would count twice.
    @contained("sglang-kimi-k25-encoder-dp-owner-only", current, fallback=False)
    @functools.wraps(current)
    def get_image_feature(self, items):
        if not (self.use_data_parallel and _switches.SWITCHES.dp_loader):
            return current(self, items)
        tower = self.vision_tower
        device = tower.device
        dtype = tower.patch_embed.proj.weight.dtype
        grid_list = [row for item in items for row in _host_grid_rows(item)]
        consumers = _switches.server_tp_size()
        for item in items:
            _switches.settle(item)  # every rank: this item's slot is accounted for below

        load_local_pixel_values = make_local_loader(
            items, device, dtype, consumers, mm_g["materialize_multimodal_features"],
            label="Kimi-K2.5/K2.7",
        )
        image_embeds = kimi_g["run_dp_sharded_mrope_vision_model"](
            tower,
            None,
            grid_list,
            rope_type="rope_2d_packed",  # MoonViT3d: grid positional, per-image list out
            load_local_pixel_values=load_local_pixel_values,
            pixel_values_device=device,
            pixel_values_dtype=dtype,
        )
        return self.mm_projector(image_embeds)

    setattr(get_image_feature, _switches.OWNER_MARK, True)
    return get_image_feature


@register
class KimiK25EncoderDpOwnerOnlyPatch(Patch):
    name = "sglang-kimi-k25-encoder-dp-owner-only"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "Kimi K2.5 encoder DP: only the owner rank materializes/reconstructs an image"
    # wraps the get_image_feature that sglang-moonvit-max-seqlen-once replaced
    after = ("sglang-moonvit-max-seqlen-once",)

    def upstream_equivalent(self) -> str | None:
        return _switches.upstream_has_it(module(SCHEDULE_BATCH))

    def not_needed(self) -> str | None:
        kimi = module(KIMI_K25)
        if not hasattr(kimi, "run_dp_sharded_mrope_vision_model"):
            return "Kimi K2.5 has no encoder data parallelism in this release"
        return None

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(KIMI_K25)
        mm = module(MM_UTILS)
        require(kimi, "KimiK25ForConditionalGeneration", "run_dp_sharded_mrope_vision_model")
        model_cls = kimi.KimiK25ForConditionalGeneration
        current = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(
            model_cls,
            "get_image_feature",
            _make_get_image_feature(current, kimi.__dict__, mm.__dict__),
        )
        ctx.set_attr(_switches.SWITCHES, "kimi_owner", True)
