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
"""

from __future__ import annotations

import functools

from ..base import Patch, PatchContext
from ..registry import register
from . import _ipc
from ._common import module, require

BASE_PROCESSOR = "sglang.srt.multimodal.processors.base_processor"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"


def _is_kimi_processor(processor) -> bool:
    return any(cls.__name__ in _ipc.KIMI_PROCESSORS for cls in type(processor).__mro__)


def mark_deferrable(processor, items, g) -> int:
    """Mark the Kimi processor's IPC-proxy items; returns how many were marked."""
    if not (g.get("SGL_USE_CUDA_IPC") and _is_kimi_processor(processor)):
        return 0
    if not getattr(getattr(processor, "server_args", None), "mm_enable_dp_encoder", False):
        return 0
    marked = 0
    for item in items:
        if _ipc.is_proxy(getattr(item, "feature", None)):
            item.model_specific_data[_ipc.DEFER_KEY] = True
            marked += 1
    return marked


def _make_process_and_combine(original, g):
    @functools.wraps(original)
    def process_and_combine_mm_data(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        mark_deferrable(self, result[0], g)
        return result

    return process_and_combine_mm_data


@register
class KimiK25DeferIpcMarker(Patch):
    name = "sglang-kimi-k25-defer-ipc-marker"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = BASE_PROCESSOR
    modules = (BASE_PROCESSOR,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "Kimi K2.5 processor marks CUDA-IPC features deferrable under encoder DP"

    def upstream_equivalent(self) -> str | None:
        return _ipc.upstream_has_it(module(SCHEDULE_BATCH))

    def apply(self, ctx: PatchContext) -> None:
        bp = module(BASE_PROCESSOR)
        require(bp, "BaseMultimodalProcessor")
        cls = bp.BaseMultimodalProcessor
        original = cls.__dict__["process_and_combine_mm_data"]
        replacement = _make_process_and_combine(original, bp.__dict__)
        ctx.set_attr(cls, "process_and_combine_mm_data", replacement)
