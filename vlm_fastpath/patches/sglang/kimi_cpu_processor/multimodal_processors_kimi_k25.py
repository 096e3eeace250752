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
    Contract (checked when it applies and per processor): ``KimiGPUProcessorWrapper.__init__``
    takes the HF processor first; ours equals the checkpoint's media processor on the probes of
    ``patches.kimi_probe`` (under its own configuration) before it replaces it, else the
    checkpoint's stays and the status says why.
    Upstream: the same idea is vllm PR #47416 (vLLM 0.25); SGLang has no equivalent.
    Applies to: sglang >=0.5.12 where the wrapper has a ``_cpu_call``, with no upper bound
    (0.5.23 preprocesses on the GPU by default; its ``_cpu_call`` is the path without CUDA or
    with ``SGLANG_FORCE_CPU_IMAGE_PREPROCESSING``).
"""

from __future__ import annotations

import functools
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.containment import call_contained
from ...core.registry import register
from .._common import module, require

KIMI_PROCESSOR = "sglang.srt.multimodal.processors.kimi_k25"
PATCH = "sglang-kimi-k25-fused-cpu-processor"
_CLASSES: dict[str, type] = {}


def contained_processor_class() -> type:
    """``FusedKimiProcessor`` whose pixel and token methods run contained (built on first use).

    After a fault in our code the checkpoint's own processor (``engine_processor``) answers
    that call: both are pure on their inputs. A module-level name (``__getattr__`` below), so
    instances pickle like the checkpoint's processor did.
    """
    cls = _CLASSES.get("ContainedFusedKimiProcessor")
    if cls is not None:
        return cls
    from ....kimi_integration import FusedKimiProcessor

    class ContainedFusedKimiProcessor(FusedKimiProcessor):
        engine_processor: Any = None

        def preprocess(self, medias: Any, *args: Any, **kwargs: Any) -> Any:
            engine = self.engine_processor
            return call_contained(
                PATCH,
                functools.partial(super().preprocess, medias, *args, **kwargs),
                None if engine is None else functools.partial(
                    engine.preprocess, medias, *args, **kwargs
                ),
                where="FusedKimiProcessor.preprocess",
            )

        def media_tokens_calculator(self, media: Any) -> int:
            engine = self.engine_processor
            return call_contained(
                PATCH,
                functools.partial(super().media_tokens_calculator, media),
                None if engine is None else functools.partial(
                    engine.media_tokens_calculator, media
                ),
                where="FusedKimiProcessor.media_tokens_calculator",
            )

    ContainedFusedKimiProcessor.__module__ = __name__
    ContainedFusedKimiProcessor.__qualname__ = "ContainedFusedKimiProcessor"
    _CLASSES["ContainedFusedKimiProcessor"] = ContainedFusedKimiProcessor
    return ContainedFusedKimiProcessor


def __getattr__(name: str) -> Any:
    if name == "ContainedFusedKimiProcessor":
        return contained_processor_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fused_media_processor(media_processor):
    """A fused processor for a checkpoint media processor (None if not convertible).

    Built as :func:`contained_processor_class`, answered by ``media_processor`` on faults.
    """
    from ....kimi_integration import FusedKimiProcessor

    if isinstance(media_processor, FusedKimiProcessor):
        return media_processor
    config = getattr(media_processor, "media_proc_cfg", None)
    if not isinstance(config, dict):
        return None
    try:
        fused = contained_processor_class()(config)
    except Exception:  # noqa: BLE001 - an unknown config keeps the checkpoint's processor
        return None
    from ...adapters import kimi_probe

    clause = kimi_probe.instance_verdict(media_processor, config)
    if clause:  # this checkpoint's processor behaves otherwise: it keeps answering
        from ...core.registry import REGISTRY

        REGISTRY.note_stand_aside(PATCH, f"media_proc_cfg {config}", clause)
        return None
    fused.engine_processor = media_processor
    return fused


def _make_init(original):
    @functools.wraps(original)
    def __init__(self, hf_processor, *args, **kwargs):
        original(self, hf_processor, *args, **kwargs)
        checkpoint = getattr(hf_processor, "media_processor", None)
        fused = fused_media_processor(checkpoint)
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
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"
    backport = False
    trigger = KIMI_PROCESSOR
    modules = (KIMI_PROCESSOR,)
    upstream_pr = ""  # SGLang has none; the same idea in vLLM is vllm-project/vllm#47416
    summary = "Kimi K2.5 CPU preprocessing uses FusedKimiProcessor (byte-identical, faster)"
    models = {"KimiK25ForConditionalGeneration": ""}

    def not_needed(self) -> str | None:
        wrapper = getattr(module(KIMI_PROCESSOR), "KimiGPUProcessorWrapper", None)
        if wrapper is None or not hasattr(wrapper, "_cpu_call"):
            return "this release has no Kimi CPU preprocessing path"
        return None

    def contract(self) -> str | None:
        wrapper = module(KIMI_PROCESSOR).KimiGPUProcessorWrapper
        return signature_clause(wrapper, "__init__", ("self", "hf_processor"))

    def apply(self, ctx: PatchContext) -> None:
        proc = module(KIMI_PROCESSOR)
        require(proc, "KimiGPUProcessorWrapper")
        wrapper = proc.KimiGPUProcessorWrapper
        ctx.set_attr(wrapper, "__init__", _make_init(wrapper.__dict__["__init__"]))
