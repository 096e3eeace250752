"""Patch of ``sglang.srt.multimodal.processors.kimi_k25`` (Kimi K2.5 request preprocessing).

sglang-kimi-k25-fused-cpu-processor
    Why: without a GPU in the tokenizer process (or when SGLang falls back to its CPU path),
    ``KimiGPUProcessorWrapper._cpu_call`` sends every image through the checkpoint's own
    remote-code media processor: a numpy float64 pipeline that costs ~1.4 s per 8 images of
    2048x2048 on two cores.
    How: after ``KimiGPUProcessorWrapper.__init__`` the wrapper's ``media_processor`` (also the
    HF processor's, which its ``__call__`` uses for pixels and ``_cpu_call`` for token counts)
    becomes a ``FusedKimiProcessor`` built from the same ``media_proc_cfg``: byte-identical
    ``pixel_values``/``grid_thws``, same token counts. The GPU path is untouched.
    Wrappers built while the patch was applied keep the fused processor after a revert.
    Upstream: the same idea is vllm PR #47416 (vLLM 0.25); SGLang has no equivalent.
    Applies to: sglang 0.5.12 - 0.5.22 where the wrapper has a ``_cpu_call``; on 0.5.23 it is
    outside its range (deliberately not applied: the release preprocesses on the GPU with PIL-
    matching antialias by default, so the CPU path is only a forced fallback).
"""

from __future__ import annotations

import functools

from ...base import Patch, PatchContext
from ...registry import register
from .._common import module, require

KIMI_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"


def fused_media_processor(media_processor):
    """A ``FusedKimiProcessor`` for a checkpoint media processor (None if not convertible)."""
    from ....kimi_integration import FusedKimiProcessor

    if isinstance(media_processor, FusedKimiProcessor):
        return media_processor
    config = getattr(media_processor, "media_proc_cfg", None)
    if not isinstance(config, dict):
        return None
    try:
        return FusedKimiProcessor(config)
    except Exception:  # noqa: BLE001 - an unknown config keeps the checkpoint's processor
        return None


def _make_init(original):
    @functools.wraps(original)
    def __init__(self, hf_processor, *args, **kwargs):
        original(self, hf_processor, *args, **kwargs)
        fused = fused_media_processor(getattr(hf_processor, "media_processor", None))
        if fused is None:
            return
        try:
            hf_processor.media_processor = fused
        except Exception:  # noqa: BLE001 - a read-only processor keeps its own
            return
        self.media_processor = fused

    return __init__


@register
class KimiFusedCpuProcessorPatch(Patch):
    name = "sglang-kimi-k25-fused-cpu-processor"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.23"
    trigger = KIMI_PROCESSOR
    modules = (KIMI_PROCESSOR,)
    upstream_pr = ""  # SGLang has none; the same idea in vLLM is vllm-project/vllm#47416
    summary = "Kimi K2.5 CPU preprocessing uses FusedKimiProcessor (byte-identical, faster)"

    def not_needed(self) -> str | None:
        wrapper = getattr(module(KIMI_PROCESSOR), "KimiGPUProcessorWrapper", None)
        if wrapper is None or not hasattr(wrapper, "_cpu_call"):
            return "this release has no Kimi CPU preprocessing path"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = module(KIMI_PROCESSOR)
        require(proc, "KimiGPUProcessorWrapper")
        wrapper = proc.KimiGPUProcessorWrapper
        ctx.set_attr(wrapper, "__init__", _make_init(wrapper.__dict__["__init__"]))
