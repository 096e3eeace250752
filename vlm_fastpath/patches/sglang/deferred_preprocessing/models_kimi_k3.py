"""Patch of ``sglang.srt.models.kimi_k3``: the owner half of deferred preprocessing for
Kimi K3 on sglang 0.5.17 (the sender half is ``multimodal_processors_kimi_k3_deferred``).

sglang-kimi-k3-deferred-owner
    Why: the sender ships each K3 image as a ``K3DeferredImage`` (uint8 CHW pixels, 3 or 4
    channels, and its resize config) instead of float32 ``pixel_values``; the rank that runs
    the K3 vision tower must produce exactly the ``pixel_values`` the release's eager GPU
    path would have produced in the tokenizer process.
    How: ``KimiK3ForConditionalGeneration.get_image_feature`` is wrapped. Items whose
    ``model_specific_data`` carries ``_vlm_fastpath_kimi_k3_deferred`` are handed to the
    release's own ``get_image_feature`` as views whose ``feature`` is materialized lazily, on
    first access, on the vision tower's device by the release's own pipeline:
    ``kimi_k25._gpu_preprocess_images`` (bicubic ``interpolate`` with antialias + round/clamp,
    then the K3 ``_fill_transparent_bg`` on the resized batch, then zero pad, normalize with
    float32 ``1/(255*std)`` and ``-mean/std``, patchify) -- the same function and
    order 0.5.18's owner runs, so the result is what the eager path computes on that device.
    K3's tower is image-wise data-parallel: the release reads ``feature`` only for the images
    its rank owns (``load_local_pixel_values``), so only the owner preprocesses. Items
    without a payload (eager requests) pass through untouched, so a batch may mix deferred
    and eager items -- 0.5.18 handles such a mix too (per item); the patch is inert for
    requests that were not deferred.
    Upstream: sglang PR #33921 (``sglang.srt.multimodal.kimi_k3_image_processing``, 0.5.18).
    Applies to: sglang 0.5.17 only (like the sender); 0.5.18+ report "upstream".
"""

from __future__ import annotations

from ...base import Patch, PatchContext
from ...registry import register
from .._common import module, require
from ._shared import K3_ITEM_KEY, check_grids, deferred_get_image_feature
from .multimodal_processors_kimi_k3 import K3_MODEL, K3_PROCESSOR, upstream_defers

K25_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"


def norm_tensors(mean, std, device):
    """The release's ``_get_gpu_norm_tensors`` arithmetic on ``device``."""
    import torch

    scale = torch.tensor([1.0 / (255.0 * s) for s in std], device=device,
                         dtype=torch.float32).view(1, 3, 1, 1)
    bias = torch.tensor([-m / s for m, s in zip(mean, std, strict=True)], device=device,
                        dtype=torch.float32).view(1, 3, 1, 1)
    return scale, bias


def materialize(images, device, grid=None):
    """float32 ``pixel_values`` of deferred K3 images on ``device`` (checked against grid)."""

    images = list(images)
    if not images:
        raise ValueError("no deferred Kimi K3 images to materialize")
    first = images[0]
    key = (first.image_mean, first.image_std, first.transparent_bg_config, first.patch_size)
    for image in images[1:]:
        if (image.image_mean, image.image_std, image.transparent_bg_config,
                image.patch_size) != key:
            raise ValueError("deferred Kimi K3 images of one item disagree on their config")
    k25 = module(K25_PROCESSOR)
    fill = module(K3_PROCESSOR)._fill_transparent_bg
    scale, bias = norm_tensors(first.image_mean, first.image_std, device)
    bg = first.transparent_bg_config
    pixel_values, grids = k25._gpu_preprocess_images(
        [image.pixels for image in images],
        [image.resize_config for image in images],
        scale,
        bias,
        first.patch_size,
        to_chw=lambda pixels: pixels.to(device),
        post_resize=lambda x: fill(x, bg),
    )
    check_grids(grids, grid, "Kimi K3")
    return pixel_values


def _make_get_image_feature(original):
    return deferred_get_image_feature(original, K3_ITEM_KEY, materialize)


@register
class KimiK3DeferredOwner(Patch):
    name = "sglang-kimi-k3-deferred-owner"
    engine = "sglang"
    versions = ">=0.5.17,<0.5.18"
    trigger = K3_MODEL
    modules = (K3_MODEL,)
    upstream_pr = "sgl-project/sglang#33921"
    summary = "Kimi K3: the vision owner preprocesses deferred images on its device"

    def upstream_equivalent(self) -> str | None:
        return upstream_defers()

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(K3_MODEL)
        require(kimi, "KimiK3ForConditionalGeneration")
        model_cls = kimi.KimiK3ForConditionalGeneration
        original = model_cls.__dict__["get_image_feature"]
        ctx.set_attr(model_cls, "get_image_feature", _make_get_image_feature(original))
