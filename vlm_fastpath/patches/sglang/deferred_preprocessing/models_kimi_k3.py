"""Patch of ``sglang.srt.models.kimi_k3``: the owner half of deferred preprocessing for
Kimi K3 on sglang 0.5.17 (the sender half is ``multimodal_processors_kimi_k3``).

sglang-kimi-k3-deferred-owner
    Why: the sender ships each K3 image as a ``DeferredPayload`` of the library's K3 recipe
    (uint8 CHW pixels, 3 or 4 channels, and the resize plan) instead of float32
    ``pixel_values``; the rank that runs the K3 vision tower must produce exactly the
    ``pixel_values`` the release's eager GPU path would have produced in the tokenizer process.
    How: ``KimiK3ForConditionalGeneration.get_image_feature`` is wrapped. Items whose
    ``model_specific_data`` carries ``_vlm_fastpath_kimi_k3_deferred`` are handed to the
    release's own ``get_image_feature`` as views whose ``feature`` is materialized lazily, on
    first access, on the vision tower's device by ``DeferredKimiProcessor.run`` with
    ``recipe="k3"`` (``kimi_integration/deferred/k3.py``: the release's bicubic ``interpolate``
    with antialias + round/clamp, the K3 background fill on the resized batch, zero pad,
    ``addcmul`` normalize with float32 ``1/(255*std)`` and ``-mean/std``, patchify; checked
    ``torch.equal`` against 0.5.17's eager path and 0.5.23's own functions).
    K3's tower is image-wise data-parallel: the release reads ``feature`` only for the images
    its rank owns (``load_local_pixel_values``), so only the owner preprocesses. Items
    without a payload (eager requests) pass through untouched, so a batch may mix deferred
    and eager items -- 0.5.18 handles such a mix too (per item); the patch is inert for
    requests that were not deferred.
    Upstream: sglang PR #33921 (``sglang.srt.multimodal.kimi_k3_image_processing``, 0.5.18).
    Applies to: sglang 0.5.17 only (like the sender); 0.5.18+ report "upstream".
"""

from __future__ import annotations

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from ._contained import contained_materialize
from ._shared import K3_ITEM_KEY, deferred_get_image_feature
from .multimodal_processors_kimi_k3 import K3_MODEL, upstream_defers

PATCH = "sglang-kimi-k3-deferred-owner"


def materialize(payloads, device, grid=None):
    return contained_materialize(PATCH, payloads, device, grid, "Kimi K3 payload")


def _make_get_image_feature(original):
    return deferred_get_image_feature(original, K3_ITEM_KEY, materialize)


@register
class KimiK3DeferredOwnerPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.17"
    trigger = K3_MODEL
    modules = (K3_MODEL,)
    upstream_pr = "sgl-project/sglang#33921"
    summary = "Kimi K3: the vision owner preprocesses deferred images on its device"

    # Payloads already sent (and senders in other processes that keep deferring) reach
    # only this reader: faulted, it answers with the reference backend on the CPU.
    stays_when_faulted = (
        "deferred payloads can only be read here; answered by the CPU reference backend"
    )

    def upstream_equivalent(self) -> str | None:
        return upstream_defers()

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(K3_MODEL)
        require(kimi, "KimiK3ForConditionalGeneration")
        model_cls = kimi.KimiK3ForConditionalGeneration
        original = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(model_cls, "get_image_feature", _make_get_image_feature(original))
