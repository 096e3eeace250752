"""Patch of ``sglang.srt.multimodal.processors.kimi_k25`` (Kimi K2.5 GPU preprocessing).

sglang-kimi-k25-batched-same-shape-resize
    Why: up to 0.5.15.post1 ``_gpu_preprocess_images`` groups a request's images by target size
    but still resizes every image of a group with its own ``F.interpolate`` call: one bicubic
    kernel launch per image, although images of one source shape could share one (0.5.16: 1.57x
    for 4 images on an H100).
    How: ``_gpu_preprocess_images`` keeps the release's grouping by target and padded size, its
    own ``_process_single_image`` for groups of one, and the release's arithmetic after the
    resize (pad, ``/ 255``, normalize, patchify, grid), but resizes the images of a group that
    share (source shape, dtype) in one call: ``_resize_images_by_source_shape(indexed_images,
    target_height, target_width)`` (0.5.16's name and contract, also published on the module).
    The resize is the release's: bicubic, ``align_corners=False``, no antialias (0.5.12 -
    0.5.16; 0.5.17 adds antialias and round/clamp, and stands aside as upstream). A release whose
    per-image resize is not that call is left alone (the patch fails to apply). Same tensors,
    ``torch.equal``, as the per-image path: bicubic resizes every (image, channel) plane on its
    own.
    Upstream: sglang PR #31227, released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where the module
    already has ``_resize_images_by_source_shape``.
"""

from __future__ import annotations

import functools
import inspect

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register
from .._common import module, require, source_of
from . import _switches

KIMI_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"
RESIZE_NAME = "_resize_images_by_source_shape"
_PARAMS = ("images", "resize_configs", "image_mean", "image_std_inv", "patch_size")


def _bicubic(batch, target_height: int, target_width: int):
    """The per-image resize of 0.5.12 - 0.5.16 on a (B, C, H, W) float batch."""
    import torch.nn.functional as F  # looked up per call: a patched ``F.interpolate`` counts

    return F.interpolate(
        batch, size=(target_height, target_width), mode="bicubic", align_corners=False
    )


def resize_images_by_source_shape(indexed_images, target_height: int, target_width: int):
    """Resize ``(index, (C, H, W) image)`` pairs to one target, one call per (shape, dtype).

    Returns ``(1, C, target_height, target_width)`` float tensors in the input order; images of
    different source shapes cannot share a rectangular batch and keep a call of their own.
    """
    import torch

    by_source: dict[tuple, list[tuple[int, object]]] = {}
    for index, image in indexed_images:
        by_source.setdefault((tuple(image.shape), image.dtype), []).append((index, image))
    resized = {}
    for members in by_source.values():
        if len(members) == 1:
            index, image = members[0]
            resized[index] = _bicubic(image.unsqueeze(0).float(), target_height, target_width)
            continue
        stacked = torch.stack([image for _, image in members]).float()
        out = _bicubic(stacked, target_height, target_width)
        for position, (index, _) in enumerate(members):
            resized[index] = out[position : position + 1]
    return [resized[index] for index, _ in indexed_images]


setattr(resize_images_by_source_shape, _switches.OURS, True)


def _to_chw(image, g):
    """What the release's multi-image branch does to an input before resizing it."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return g["_pil_to_cuda_chw"](image)
    ensure = g.get("_ensure_chw_rgb")  # 0.5.15: grayscale/RGBA tensors to 3 channels
    return ensure(image) if ensure is not None else image


def _normalize_and_patchify(batch, target, padded, image_mean, image_std_inv, patch_size):
    """The release's arithmetic after the resize, on a (B, C, h, w) batch."""
    import torch
    import torch.nn.functional as F

    pad_h, pad_w = padded[0] - target[0], padded[1] - target[1]
    if pad_h > 0 or pad_w > 0:
        batch = F.pad(batch, (0, pad_w, 0, pad_h), value=0.0)
    batch = batch / 255.0
    batch = (batch - image_mean) * image_std_inv
    count, channels, height, width = batch.shape
    rows, cols = height // patch_size, width // patch_size
    batch = batch.view(count, channels, rows, patch_size, cols, patch_size)
    batch = batch.permute(0, 2, 4, 1, 3, 5).reshape(count, -1, channels, patch_size, patch_size)
    grid = torch.tensor([1, rows, cols], dtype=torch.int64, device=batch.device)
    return batch, grid


def _make_gpu_preprocess(original, g):
    # Images in, new tensors out: the release's function may answer a call that faulted.
    @contained("sglang-kimi-k25-batched-same-shape-resize", original)
    @functools.wraps(original)
    def _gpu_preprocess_images(images, resize_configs, image_mean, image_std_inv, patch_size):
        import torch

        groups: dict[tuple[int, int, int, int], list[int]] = {}
        for index, config in enumerate(resize_configs):
            height, width = config["new_height"], config["new_width"]
            key = (height, width, height + config["pad_height"], width + config["pad_width"])
            groups.setdefault(key, []).append(index)
        if len(images) < 2 or all(len(members) == 1 for members in groups.values()):
            return original(images, resize_configs, image_mean, image_std_inv, patch_size)
        patches, grids = [None] * len(images), [None] * len(images)
        for (height, width, padded_h, padded_w), members in groups.items():
            if len(members) == 1:
                index = members[0]
                patches[index], grids[index] = g["_process_single_image"](
                    images[index], resize_configs[index], image_mean, image_std_inv, patch_size
                )
                continue
            indexed = [(index, _to_chw(images[index], g)) for index in members]
            resized = g[RESIZE_NAME](indexed, height, width)
            batch, grid = _normalize_and_patchify(
                torch.cat(resized, dim=0), (height, width), (padded_h, padded_w),
                image_mean, image_std_inv, patch_size,
            )
            for position, index in enumerate(members):
                patches[index], grids[index] = batch[position], grid
        return torch.cat(patches, dim=0), torch.stack(grids, dim=0)

    setattr(_gpu_preprocess_images, _switches.OURS, True)
    return _gpu_preprocess_images


def release_resizes_plainly(proc) -> bool:
    """The release module resizes each image with plain bicubic ``F.interpolate`` (no
    antialias, no rounding; read from its code): the resize this patch batches."""
    own = source_of(getattr(proc, "_gpu_preprocess_images", None))
    helpers = "".join(
        source_of(getattr(proc, name, None))
        for name in ("_process_single_image", "_resize_bicubic_if_needed")
    )
    return (
        "F.interpolate(" in own
        and 'mode="bicubic"' in own
        and "align_corners=False" in own
        and not any(word in own + helpers for word in ("antialias", ".round"))
    )


@register
class KimiK25BatchedSameShapeResizePatch(Patch):
    name = "sglang-kimi-k25-batched-same-shape-resize"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = KIMI_PROCESSOR
    modules = (KIMI_PROCESSOR,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "Kimi K2.5 GPU preprocessing: one interpolate per (source shape, dtype, target)"

    def upstream_equivalent(self) -> str | None:
        existing = getattr(module(KIMI_PROCESSOR), RESIZE_NAME, None)
        if existing is not None and not getattr(existing, _switches.OURS, False):
            return f"the Kimi K2.5 processor has {RESIZE_NAME} (same-shape images batched)"
        return None

    def not_needed(self) -> str | None:
        if not hasattr(module(KIMI_PROCESSOR), "_gpu_preprocess_images"):
            return "this release has no Kimi K2.5 GPU preprocessing"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = module(KIMI_PROCESSOR)
        require(proc, "_gpu_preprocess_images", "_process_single_image", "_pil_to_cuda_chw")
        original = proc.__dict__["_gpu_preprocess_images"]
        if tuple(inspect.signature(original).parameters) != _PARAMS:
            raise TypeError(f"_gpu_preprocess_images{inspect.signature(original)} is unknown")
        if not release_resizes_plainly(proc):
            raise RuntimeError("the release resizes differently (antialias/rounding): left as is")
        g = proc.__dict__
        ctx.set_attr(proc, RESIZE_NAME, resize_images_by_source_shape)
        ctx.set_attr(proc, "_gpu_preprocess_images", _make_gpu_preprocess(original, g))
