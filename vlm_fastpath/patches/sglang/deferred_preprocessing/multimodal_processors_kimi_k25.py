"""Patch of ``sglang.srt.multimodal.processors.kimi_k25``: the sender half of deferred
preprocessing for Kimi K2.5/K2.6/K2.7 (the owner half is ``models_kimi_k25_deferred``).

sglang-kimi-k25-deferred-sender
    Why: on its CPU path the tokenizer process preprocesses every image into float32
    ``pixel_values`` (3 x padded W x padded H x 4 bytes) and pickles them to the scheduler:
    73.0 MiB for 4 images of 1536x1024, four times their uint8 pixels (18.0 MiB). SGLang
    defers preprocessing to the vision owner only for Kimi K3, only from 0.5.18.
    How: ``KimiGPUProcessorWrapper.__call__`` asks ``DeferredKimiProcessor.prepare`` for each
    image's smallest exact form (raw uint8 CHW; eager float32 when that is smaller, e.g. very
    large lossless inputs; SGLang's loader has already decoded the bytes, so the encoded form
    is not available here). Token counts and ``image_grid_thw`` come from the sizes alone
    (the payload's plans); ``input_ids`` are built exactly as the release's CPU path builds
    them (its placeholder expansion, then the HF processor's text-only tokenization or
    ``_expand_image_token_ids`` of the request's own ids). The returned ``pixel_values`` is
    a 1-D uint8 content digest with one byte per patch (see ``_kimi_deferred``): SGLang's own
    per-image split, hashing, pad values and embedding cache work unchanged, and the payloads
    ride along under ``model_specific_data["_vlm_fastpath_kimi_deferred"]`` (one per image,
    attached by a wrapped ``collect_mm_items_from_processor_output``). Eager and deferred
    images mix freely in one request: each payload says which it is and the owner
    materializes both (``DeferredKimiProcessor.run``).
    When: ``VLM_FASTPATH_DEFER=1`` defers every request whose images are host images;
    ``VLM_FASTPATH_DEFER=0`` never defers; unset (``auto``, the default) defers exactly where
    the release would take its CPU path (no CUDA in the tokenizer process, or
    ``SGLANG_FORCE_CPU_IMAGE_PREPROCESSING``, 0.5.20+), where deferral is bit-identical to the
    release's output. Where the release preprocesses on the GPU in the tokenizer process (CUDA
    IPC, no float bytes pickled) ``auto`` leaves it alone: deferral there would change pixels on
    releases before 0.5.17 (their GPU resize has no antialias; ours matches Pillow). Images
    already decoded to CUDA tensors (nvJPEG) are never deferred. The sender only defers when the
    owner patch is active in its own process (the processor module imports the model module).
    Upstream: sglang PR #33921 (Kimi K3 only, 0.5.18); nothing for K2.5.
    Not with msgpack IPC on 0.5.19+ (``SGLANG_USE_PICKLE_IPC=0``; pickle is the default): there
    ``mm_inputs`` travels as typed msgspec structs and a payload would reach the owner as a plain
    dict, so the release's eager path runs (``transport_keeps_payloads``).
    Applies to: sglang 0.5.12 - 0.5.22 (multimodal items are ``msgspec`` structs from 0.5.19;
    unknown attributes go to ``model_specific_data``). 0.5.23 is outside the range; it
    preprocesses K2.5 on the GPU by default; K3 deferral there is upstream's own.
"""

from __future__ import annotations

import functools

from .... import settings
from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from ._contained import contained_sender
from ._shared import (
    ITEM_KEY,
    collect_with_payloads,
    deferring_call,
    digest_feature,
    model_has_owner,
)

KIMI_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"
KIMI_K25 = "sglang.srt.models.kimi_k25"
_PROC_ATTR = "_vlm_fastpath_deferred_processor"


PATCH = "sglang-kimi-k25-deferred-sender"

def owner_ready() -> bool:
    """True when this process's Kimi K2.5 model carries the deferred owner patch."""
    return model_has_owner(KIMI_K25, "KimiK25ForConditionalGeneration")


def _host_images(images) -> bool:
    import torch

    for image in images:
        if isinstance(image, torch.Tensor) and image.device.type != "cpu":
            return False
    return True


def _pickle_ipc() -> bool:
    """The release's IPC mode: its io_struct's if loaded, else its env setting (default on)."""
    import sys

    io_struct = sys.modules.get("sglang.srt.managers.io_struct")
    if io_struct is not None and hasattr(io_struct, "_USE_PICKLE_IPC"):
        return io_struct._USE_PICKLE_IPC is not False
    try:
        from sglang.srt.environ import envs

        setting = getattr(envs, "SGLANG_USE_PICKLE_IPC", None)
        return True if setting is None else bool(setting.get())
    except Exception:  # noqa: BLE001 - releases without the setting always pickle
        return True


def transport_keeps_payloads() -> bool:
    """Whether the tokenizer-to-scheduler hop delivers a ``DeferredPayload`` as one.

    From 0.5.19 ``MultimodalDataItem`` is a ``msgspec.Struct`` and ``mm_inputs`` is a typed
    field: with ``SGLANG_USE_PICKLE_IPC=0`` (msgpack IPC; the default is pickle) its
    ``model_specific_data`` values are decoded as plain containers, so the owner would get a
    dict and could not rebuild the pixels. 0.5.18 pickles ``mm_inputs`` in both modes.
    """
    import sys

    if _pickle_ipc():
        return True
    item_cls = getattr(sys.modules.get("sglang.srt.managers.schedule_batch"),
                       "MultimodalDataItem", None)
    try:
        import msgspec
    except ImportError:
        return True
    return not (isinstance(item_cls, type) and issubclass(item_cls, msgspec.Struct))


def should_defer(wrapper, images, g) -> bool:
    if not images or not owner_ready() or not _host_images(images):
        return False
    if not transport_keeps_payloads():
        return False
    mode = settings.defer_mode()
    if mode == "off":
        return False
    if mode == "on":
        return True
    import torch

    if g.get("_FORCE_CPU_IMAGE_PREPROCESSING", False):
        return True
    return not torch.cuda.is_available()


def deferred_processor(wrapper):
    """The wrapper's ``DeferredKimiProcessor`` (built once from its ``media_proc_cfg``)."""
    proc = wrapper.__dict__.get(_PROC_ATTR)
    if proc is None:
        from ....kimi_integration.deferred import DeferredKimiProcessor

        media = getattr(wrapper, "media_processor", None)
        config = getattr(media, "media_proc_cfg", None)
        if config is None:
            config = wrapper._hf_processor.media_processor.media_proc_cfg
        # K2.5 drops alpha (``convert("RGB")``); SGLang's loader hands over decoded images,
        # so the encoded form is never offered.
        proc = DeferredKimiProcessor(config, None, allow_encoded=False)
        wrapper.__dict__[_PROC_ATTR] = proc
    return proc


def deferred_call(wrapper, text, images, original_input_ids, kwargs, g):
    """The release's CPU-path output with pixels replaced by deferred payloads."""
    import torch

    proc = deferred_processor(wrapper)
    payloads = [proc.prepare({"type": "image", "image": image}) for image in images]
    plans = [payload.medias[0].plan for payload in payloads]
    counts = [int(plan.num_tokens) for plan in plans]
    input_text = text[0] if isinstance(text, list) else text
    expand = g.get("_expand_image_token_ids")
    if original_input_ids is not None and expand is not None:
        out = {"input_ids": expand(original_input_ids, wrapper._image_token_id, counts)}
    else:
        parts = input_text.split(wrapper._image_token)
        pieces = [parts[0]]
        for count, part in zip(counts, parts[1:], strict=False):
            pieces.append(wrapper._image_token * count + part)
        out = dict(wrapper._hf_processor(text=["".join(pieces)], **kwargs))
        for key in ("pixel_values", "grid_thws", "image_grid_thw"):
            out.pop(key, None)
    out["pixel_values"] = torch.cat(
        [digest_feature(p, plan.num_patches) for p, plan in zip(payloads, plans, strict=True)]
    )
    out["image_grid_thw"] = torch.tensor([plan.grid_thw for plan in plans], dtype=torch.int64)
    out[ITEM_KEY] = payloads
    return out


def _make_call(original, g):
    return deferring_call(
        original,
        functools.partial(should_defer, g=g),
        contained_sender(PATCH, functools.partial(deferred_call, g=g)),
    )


def _make_collect(original):
    return collect_with_payloads(original, ITEM_KEY, "Kimi")


@register
class KimiK25DeferredSenderPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12,<0.5.23"
    trigger = KIMI_PROCESSOR
    modules = (KIMI_PROCESSOR,)
    upstream_pr = "sgl-project/sglang#33921"
    summary = "Kimi K2.5: ship raw uint8 images (DeferredPayload), preprocess on the owner"

    def not_needed(self) -> str | None:
        proc = module(KIMI_PROCESSOR)
        if getattr(proc, "KimiGPUProcessorWrapper", None) is None:
            return "this release has no Kimi K2.5 processor wrapper"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = module(KIMI_PROCESSOR)
        require(proc, "KimiGPUProcessorWrapper", "KimiK2_5VLImageProcessor")
        wrapper = proc.KimiGPUProcessorWrapper
        ctx.set_attr(wrapper, "__call__", _make_call(wrapper.__dict__["__call__"], proc.__dict__))
        processor = proc.KimiK2_5VLImageProcessor
        collect = processor.collect_mm_items_from_processor_output
        ctx.set_attr(processor, "collect_mm_items_from_processor_output", _make_collect(collect))
