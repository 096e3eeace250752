"""Patch of ``sglang.srt.multimodal.processors.kimi_k3``: the sender half of deferred
preprocessing for Kimi K3 on sglang 0.5.17 (the owner half is ``models_kimi_k3``).

sglang-kimi-k3-deferred-sender
    Why: 0.5.17 is the first release with Kimi K3 and preprocesses every K3 image in the
    tokenizer process: resize, background fill, normalize and patchify produce float32
    ``pixel_values`` (3 x padded W x padded H x 4 bytes) that are pickled to the scheduler
    with ``--mm-feature-transport cpu``, about four times the image's uint8 pixels.
    0.5.18 ships the raw uint8 image instead and preprocesses it on the vision owner.
    How: as 0.5.18 does it. ``KimiK3GPUProcessorWrapper.__call__`` is wrapped; for a request
    whose images are all PIL images or uint8 tensors, it sums raw bytes (3 or 4 channels x W
    x H; 4 when the image carries transparency, which K3 composites after the resize) and
    processed bytes (3 x padded W x padded H x 4) over the request's images and defers when
    raw <= processed (eager otherwise, as upstream). Deferred, it returns what the release's
    ``_gpu_call`` returns -- the same ``input_ids`` (the release's ``_prepare_input_ids``) and
    ``image_grid_thw`` (the release's ``navit_resize_config``) -- but with ``pixel_values`` a
    1-D uint8 content digest of one byte per patch (see ``_shared``), so the
    release's per-image split, hashing, pad values and embedding cache work unchanged; one
    ``DeferredPayload`` of the library's K3 recipe per image (uint8 CHW pixels, alpha kept
    only where the checkpoint's ``transparent_bg_config`` fills it, and the resize plan,
    checked equal to the release's ``navit_resize_config``) rides under
    ``model_specific_data["_vlm_fastpath_kimi_k3_deferred"]`` (attached by a wrapped
    ``collect_mm_items_from_processor_output``). The owner runs the same recipe
    (``DeferredKimiProcessor.run``) on the tower's device.
    When: ``VLM_FASTPATH_DEFER=0`` never defers; unset (``auto``) defers where 0.5.18 does:
    CUDA in the tokenizer process (the release's GPU path) and CPU feature transport (with
    CUDA IPC no float bytes are pickled). ``VLM_FASTPATH_DEFER=1`` also defers where the
    tokenizer has no CUDA: the owner then applies the release's GPU-path arithmetic instead
    of the checkpoint's CPU processor (the eager CPU path), which is not bit-identical.
    The sender only defers when the owner patch is active in its own process (the processor
    module imports the model module).
    Upstream: sglang PR #33921 (``sglang.srt.multimodal.kimi_k3_image_processing``, 0.5.18).
    Applies to: sglang 0.5.17 only; 0.5.18+ report "upstream" (they define
    ``kimi_k3_image_processing.DEFERRED_PREPROCESSING_KEY``); older releases have no K3.
"""

from __future__ import annotations

import functools
import importlib.util

from .... import settings
from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from ._contained import contained_sender
from ._shared import (
    K3_ITEM_KEY,
    collect_with_payloads,
    deferring_call,
    digest_feature,
    model_has_owner,
)

K3_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k3"
K3_MODEL = "sglang.srt.models.kimi_k3"
K25_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"
UPSTREAM = "sglang.srt.multimodal.kimi_k3_image_processing"
TRANSPORT_ATTR = "_vlm_fastpath_mm_feature_transport"


PATCH = "sglang-kimi-k3-deferred-sender"

def upstream_defers() -> str | None:
    """Reason string when the release defers K3 preprocessing itself (0.5.18+)."""
    try:
        if importlib.util.find_spec(UPSTREAM) is None:
            return None
    except (ImportError, ValueError):
        return None
    mod = module(UPSTREAM)
    if getattr(mod, "DEFERRED_PREPROCESSING_KEY", None) is None:
        return None
    return (f"{UPSTREAM}.DEFERRED_PREPROCESSING_KEY: the release defers K3 preprocessing "
            "to the vision owner (sglang #33921)")


def owner_ready() -> bool:
    """True when this process's Kimi K3 model carries the deferred owner patch."""
    return model_has_owner(K3_MODEL, "KimiK3ForConditionalGeneration")


def raw_channels(image) -> int:
    """Channels 0.5.18's rule counts for an image (4 when K3 keeps its alpha)."""
    import torch

    from ....kimi_integration.deferred.transport import k3_keeps_alpha

    if isinstance(image, torch.Tensor):
        return 3 if image.dim() == 2 or image.shape[0] == 1 else int(image.shape[0])
    return 4 if k3_keeps_alpha(image) else 3


def resize_configs(wrapper, images, g):
    size = g["_get_image_dimensions"]
    navit = g["navit_resize_config"]
    sizes = [tuple(int(v) for v in size(image)) for image in images]
    configs = [
        navit(w, h, wrapper._patch_size, wrapper._merge_kernel_size, wrapper._in_patch_limit,
              wrapper._patch_limit_on_one_side, wrapper._fixed_output_tokens)
        for w, h in sizes
    ]
    return sizes, configs


def byte_counts(images, sizes, configs) -> tuple[int, int]:
    """(raw, processed) bytes of a request: the quantities 0.5.18's rule compares."""
    raw = processed = 0
    for image, (w, h), cfg in zip(images, sizes, configs, strict=True):
        raw += raw_channels(image) * w * h
        processed += (3 * (cfg["new_width"] + cfg["pad_width"])
                      * (cfg["new_height"] + cfg["pad_height"]) * 4)
    return raw, processed


def defer_by_size(raw: int, processed: int) -> bool:
    """0.5.18's rule: ship the raw image when it is no larger than the processed one."""
    return raw <= processed


def _deferrable_kind(images) -> bool:
    import torch
    from PIL import Image

    return all(isinstance(image, Image.Image)
               or (isinstance(image, torch.Tensor) and image.dtype == torch.uint8)
               for image in images)


def should_defer(wrapper, images, g) -> bool:
    if not images or not owner_ready() or not _deferrable_kind(images):
        return False
    mode = settings.defer_mode()
    if mode == "off":
        return False
    if mode == "auto":
        import torch

        if not torch.cuda.is_available():
            return False
        if getattr(wrapper, TRANSPORT_ATTR, "cpu") != "cpu":
            return False
    sizes, configs = resize_configs(wrapper, images, g)
    return defer_by_size(*byte_counts(images, sizes, configs))


_PROC_ATTR = "_vlm_fastpath_k3_deferred_processor"


def k3_processor(wrapper):
    """The wrapper's ``DeferredKimiProcessor`` with the K3 recipe (built once)."""
    proc = wrapper.__dict__.get(_PROC_ATTR)
    if proc is None:
        from ....kimi_integration.deferred import BackgroundConfig, DeferredKimiProcessor

        config = {
            "patch_size": wrapper._patch_size,
            "merge_kernel_size": wrapper._merge_kernel_size,
            "in_patch_limit": wrapper._in_patch_limit,
            "patch_limit_on_one_side": wrapper._patch_limit_on_one_side,
            "fixed_output_tokens": wrapper._fixed_output_tokens,
            "image_mean": list(wrapper._image_mean),
            "image_std": list(wrapper._image_std),
        }
        background = BackgroundConfig.from_checkpoint(
            getattr(wrapper, "_transparent_bg_config", None)
        )
        # SGLang's loader hands over decoded images: the encoded form is never offered.
        proc = DeferredKimiProcessor(config, background, allow_encoded=False, recipe="k3")
        wrapper.__dict__[_PROC_ATTR] = proc
    return proc


def _as_media(image):
    """One image as the library takes it: PIL as is, a CHW uint8 tensor as HWC (or HW)."""
    import torch

    if isinstance(image, torch.Tensor):
        image = image.detach().cpu()
        if image.dim() == 3:
            image = image[0] if image.shape[0] == 1 else image.permute(1, 2, 0)
        image = image.contiguous()
    return {"type": "image", "image": image}


def _plan_matches(plan, cfg) -> bool:
    return (plan.new_width, plan.new_height, plan.padded_width, plan.padded_height) == (
        cfg["new_width"], cfg["new_height"], cfg["new_width"] + cfg["pad_width"],
        cfg["new_height"] + cfg["pad_height"])


def deferred_call(wrapper, text, images, original_input_ids, kwargs, g):
    """The release's ``_gpu_call`` output with pixels replaced by deferred payloads (the
    release's ``_gpu_call`` takes no extra processor kwargs, so ``kwargs`` is unused).

    None (the release's own call runs) if the library's plan of an image differs from the
    release's ``navit_resize_config``."""
    import torch

    release_grid = module(K25_PROCESSOR)._grid_thw_from_resize_config
    sizes, configs = resize_configs(wrapper, images, g)
    proc = k3_processor(wrapper)
    payloads, digests, grids = [], [], []
    for image, cfg in zip(images, configs, strict=True):
        payload = proc.prepare(_as_media(image))
        plan = payload.medias[0].plan
        grid = tuple(int(v) for v in release_grid(cfg, wrapper._patch_size))
        if not _plan_matches(plan, cfg) or tuple(plan.grid_thw) != grid:
            return None
        payloads.append(payload)
        digests.append(digest_feature(payload, plan.num_patches))
        grids.append(grid)
    input_text = text[0] if isinstance(text, list) else text
    input_ids = wrapper._prepare_input_ids(input_text, configs, original_input_ids, sizes)
    return {
        "input_ids": input_ids,
        "pixel_values": torch.cat(digests),
        "image_grid_thw": torch.tensor(grids, dtype=torch.int64),
        K3_ITEM_KEY: payloads,
    }


def _make_call(original, g):
    return deferring_call(
        original,
        functools.partial(should_defer, g=g),
        contained_sender(PATCH, functools.partial(deferred_call, g=g)),
    )


def _make_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        wrapper = getattr(self, "_processor", None)
        if wrapper is not None:
            setattr(wrapper, TRANSPORT_ATTR, getattr(self, "mm_feature_transport", "cpu"))

    return __init__


def _make_collect(original):
    return collect_with_payloads(original, K3_ITEM_KEY, "Kimi K3")


@register
class KimiK3DeferredSenderPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.17"
    trigger = K3_PROCESSOR
    modules = (K3_PROCESSOR,)
    upstream_pr = "sgl-project/sglang#33921"
    summary = "Kimi K3: ship raw uint8 images when raw <= processed, preprocess on the owner"

    def upstream_equivalent(self) -> str | None:
        return upstream_defers()

    def not_needed(self) -> str | None:
        proc = module(K3_PROCESSOR)
        if getattr(proc, "KimiK3GPUProcessorWrapper", None) is None:
            return "this release has no Kimi K3 processor wrapper"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = module(K3_PROCESSOR)
        require(proc, "KimiK3GPUProcessorWrapper", "KimiK3ImageProcessor",
                "navit_resize_config", "_get_image_dimensions")
        require(module(K25_PROCESSOR), "_grid_thw_from_resize_config")
        wrapper = proc.KimiK3GPUProcessorWrapper
        require(wrapper, "_prepare_input_ids")
        ctx.set_attr(wrapper, "__call__", _make_call(wrapper.__dict__["__call__"], proc.__dict__))
        processor = proc.KimiK3ImageProcessor
        ctx.set_attr(processor, "__init__", _make_init(processor.__dict__["__init__"]))
        collect = processor.collect_mm_items_from_processor_output
        ctx.set_attr(processor, "collect_mm_items_from_processor_output", _make_collect(collect))
