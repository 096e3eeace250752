"""Patch of ``sglang.srt.multimodal.processors.base_processor`` (tokenizer-side item output).

sglang-kimi-k25-defer-ipc-marker
    Why: the scheduler can only leave a CUDA-IPC feature lazy for the encoder-DP owner rank if
    the processor says that the model consumes each image on a single rank; up to 0.5.15.post1
    nothing says so.
    How: after ``BaseMultimodalProcessor.process_and_combine_mm_data`` (which hashes the items
    and wraps their features for CUDA IPC), the Kimi K2.5 processor's items whose feature is an
    IPC proxy get 0.5.16's marker ``_sglang_defer_cuda_ipc_feature_reconstruction`` in
    ``model_specific_data`` when CUDA IPC is on and the server runs the encoder data-parallel.
    A marker alone changes nothing: ``sglang-ipc-deferred-reconstruction`` honours it only when
    every consuming piece is active in the scheduler. Other processors are untouched.
    Upstream: sglang PR #31227 (``KimiK2_5VLImageProcessor.process_mm_data_async``), 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MultimodalDataItem`` has ``can_defer_cuda_ipc_feature_reconstruction``.

sglang-qwen-vl-defer-ipc-marker
    Why: as above, for Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE (``QwenVLImageProcessor``, which
    also serves Qwen-VL models that have no owner-only patch, so the processor alone is no key).
    How: the image items (not videos) of that processor whose feature is an IPC proxy get the
    marker and ``_vlm_fastpath_ipc_owner`` = the served architecture (``hf_config.architectures``)
    when it is one of those three, CUDA IPC is on and the encoder runs data-parallel; the
    scheduler defers such an item only while that architecture's owner-only
    ``get_image_feature`` (``sglang-qwen2-5-vl-/qwen3-vl-encoder-dp-owner-only``) is in place.
    Upstream: 0.5.18+ mark Qwen-VL items (``QwenVLImageProcessor``); 0.5.16 - 0.5.17 mark none.
    Applies to: sglang 0.5.12 - 0.5.15.post1; "upstream" where the release's Qwen-VL processor
    sets the marker (0.5.18+); 0.5.16 - 0.5.17 not covered.
"""

from __future__ import annotations

import functools

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from . import _switches

BASE_PROCESSOR = "sglang.srt.multimodal.processors.base_processor"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"


def _is_kimi_processor(processor) -> bool:
    return any(cls.__name__ in _switches.KIMI_PROCESSORS for cls in type(processor).__mro__)


def mark_deferrable(processor, items, g) -> int:
    """Mark the Kimi processor's IPC-proxy items; returns how many were marked."""
    if not (g.get("SGL_USE_CUDA_IPC") and _is_kimi_processor(processor)):
        return 0
    if not getattr(getattr(processor, "server_args", None), "mm_enable_dp_encoder", False):
        return 0
    marked = 0
    for item in items:
        if _switches.is_proxy(getattr(item, "feature", None)):
            item.model_specific_data[_switches.DEFER_KEY] = True
            marked += 1
    return marked


def _served_architecture(processor) -> str | None:
    archs = getattr(getattr(processor, "hf_config", None), "architectures", None) or ()
    return next((a for a in archs if a in _switches.QWEN_OWNERS), None)


def mark_qwen_deferrable(processor, items, g) -> int:
    """Mark the Qwen-VL processor's IPC-proxy image items; returns how many were marked."""
    if not g.get("SGL_USE_CUDA_IPC"):
        return 0
    if not any(cls.__name__ in _switches.QWEN_PROCESSORS for cls in type(processor).__mro__):
        return 0
    if not getattr(getattr(processor, "server_args", None), "mm_enable_dp_encoder", False):
        return 0
    arch = _served_architecture(processor)
    if arch is None:
        return 0
    marked = 0
    for item in items:
        modality = getattr(getattr(item, "modality", None), "name", None)
        if modality == "IMAGE" and _switches.is_proxy(getattr(item, "feature", None)):
            item.model_specific_data[_switches.DEFER_KEY] = True
            item.model_specific_data[_switches.OWNER_KEY] = arch
            marked += 1
    return marked


def _make_process_and_combine(original, g, mark=mark_deferrable):
    @functools.wraps(original)
    def process_and_combine_mm_data(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        mark(self, result[0], g)
        return result

    return process_and_combine_mm_data


@register
class KimiK25DeferIpcMarkerPatch(Patch):
    name = "sglang-kimi-k25-defer-ipc-marker"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = BASE_PROCESSOR
    modules = (BASE_PROCESSOR,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "Kimi K2.5 processor marks CUDA-IPC features deferrable under encoder DP"

    def upstream_equivalent(self) -> str | None:
        return _switches.upstream_has_it(module(SCHEDULE_BATCH))

    def apply(self, ctx: PatchContext) -> None:
        bp = module(BASE_PROCESSOR)
        require(bp, "BaseMultimodalProcessor")
        cls = bp.BaseMultimodalProcessor
        original = cls.__dict__["process_and_combine_mm_data"]
        replacement = _make_process_and_combine(original, bp.__dict__)
        ctx.set_attr(cls, "process_and_combine_mm_data", replacement)


def _qwen_processor_marks() -> bool:
    """The release's Qwen-VL processor sets the deferral marker itself (read, not imported)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("sglang.srt.multimodal.processors.qwen_vl")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:
        return False
    with open(spec.origin, encoding="utf-8") as handle:
        return "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY" in handle.read()


@register
class QwenVlDeferIpcMarkerPatch(Patch):
    name = "sglang-qwen-vl-defer-ipc-marker"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = BASE_PROCESSOR
    modules = (BASE_PROCESSOR,)
    upstream_pr = ""
    summary = "Qwen-VL processor marks CUDA-IPC image features deferrable under encoder DP"

    def upstream_equivalent(self) -> str | None:
        if _switches.upstream_has_it(module(SCHEDULE_BATCH)) and _qwen_processor_marks():
            return "the Qwen-VL processor marks deferrable CUDA-IPC features"
        return None

    def apply(self, ctx: PatchContext) -> None:
        bp = module(BASE_PROCESSOR)
        require(bp, "BaseMultimodalProcessor")
        cls = bp.BaseMultimodalProcessor
        current = cls.process_and_combine_mm_data
        replacement = _make_process_and_combine(current, bp.__dict__, mark_qwen_deferrable)
        ctx.set_attr(cls, "process_and_combine_mm_data", replacement)
