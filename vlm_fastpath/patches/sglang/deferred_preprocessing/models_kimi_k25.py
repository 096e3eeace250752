"""Patch of ``sglang.srt.models.kimi_k25``: the owner half of deferred preprocessing for
Kimi K2.5/K2.6/K2.7 (the sender half is ``multimodal_processors_kimi_k25_deferred``).

sglang-kimi-k25-deferred-owner
    Why: the sender ships each image as a ``DeferredPayload`` (raw uint8 pixels and the
    resize plan) instead of float32 ``pixel_values``; the rank that runs MoonViT must turn it
    back into exactly the ``pixel_values`` the eager path would have produced.
    How: ``KimiK25ForConditionalGeneration.get_image_feature`` is wrapped. Items whose
    ``model_specific_data`` carries ``_vlm_fastpath_kimi_deferred`` are handed to the
    release's own ``get_image_feature`` as views whose ``feature`` is materialized lazily, on
    first access, by ``DeferredKimiProcessor.run(payload, device=<vision tower device>)``:
    on a CPU tower the result is ``torch.equal`` to the eager ``FusedKimiProcessor`` output;
    on a GPU the uint8 pixels are copied once and resized (Pillow-exact torch port, same-shape
    images of an item in one call), padded, normalized and patchified there
    (``VLM_FASTPATH_DEFER_RESIZE`` picks the backend: auto, pillow, torch-pillow,
    torch-antialias). Eager-form payloads (an image whose float32 pixels are smaller than its
    raw form) are materialized alongside; items without a payload (eager requests,
    precomputed or processor-output inputs) pass through untouched, so a batch may mix them
    freely -- upstream K3 raises on such a mix. Lazy views mean that with encoder-DP on
    0.5.16+ (the release materializes only the images its rank owns) only the owner rank
    preprocesses; on 0.5.12 - 0.5.15 every rank runs the whole tower, so every rank
    materializes every image (as every rank received the eager pixels before).
    The patch is inert for requests that were not deferred.
    Upstream: sglang PR #33921 (Kimi K3 only, 0.5.18); nothing for K2.5.
    Applies to: sglang 0.5.12 - 0.5.22 (like the sender).
"""

from __future__ import annotations

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from ._contained import contained_materialize
from ._shared import ITEM_KEY, deferred_get_image_feature

KIMI_K25 = "sglang.srt.models.kimi_k25"
PATCH = "sglang-kimi-k25-deferred-owner"


def materialize(payloads, device, grid=None):
    return contained_materialize(PATCH, payloads, device, grid, "Kimi payload")


def _make_get_image_feature(original):
    return deferred_get_image_feature(original, ITEM_KEY, materialize)


@register
class KimiK25DeferredOwnerPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12,<0.5.23"
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "sgl-project/sglang#33921"
    summary = "Kimi K2.5: the vision owner preprocesses deferred images on its device"
    # outermost get_image_feature wrapper: the items it hands on are already materialized
    after = ("sglang-moonvit-max-seqlen-once", "sglang-kimi-k25-encoder-dp-owner-only")

    # Payloads already sent (and senders in other processes that keep deferring) reach
    # only this reader: faulted, it answers with the reference backend on the CPU.
    stays_when_faulted = (
        "deferred payloads can only be read here; answered by the CPU reference backend"
    )

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(KIMI_K25)
        require(kimi, "KimiK25ForConditionalGeneration")
        model_cls = kimi.KimiK25ForConditionalGeneration
        original = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(model_cls, "get_image_feature", _make_get_image_feature(original))
