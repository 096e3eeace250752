"""Patch of ``sglang.srt.multimodal.processors.qwen_vl``: Qwen-VL videos through our twin.

sglang-qwen-vl-cpu-video-processor
    Why: transformers' Qwen-VL video processor is most of a video request's CPU time; ours
    gives the same ``pixel_values_videos``/``video_grid_thw`` faster.
    How: after ``QwenVLImageProcessor.__init__`` (and the image patch's wrapper), its
    ``_processor`` is a view whose ``video_processor`` is the exact twin; SGLang's own
    ``preprocess_video`` (sampling, bilinear resize) is untouched. Processors built while the
    patch was applied keep the view after a revert, but the twin then answers with
    transformers' code.
"""

from __future__ import annotations

import functools
from typing import Any

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require

QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl"
PATCH = "sglang-qwen-vl-cpu-video-processor"


def _make_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            from ...adapters.qwen_video_twin import processor_view

            hf_processor = self.__dict__.get("_processor")
            if hf_processor is not None:
                self._processor = processor_view(hf_processor, PATCH)
        except Exception as exc:  # noqa: BLE001 - the engine keeps its processor
            from ...adapters.qwen_video_twin import logger

            logger.warning("vlm_fastpath: %s: keeping SGLang's processor (%r)", PATCH, exc)

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


@register
class QwenVLCpuVideoProcessorPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"  # the sweep's first release; no upper bound: the contract decides
    backport = False
    trigger = QWEN_VL
    modules = (QWEN_VL,)
    upstream_pr = ""
    requires = ("sglang-qwen-vl-cpu-image-processor",)
    summary = (
        "Qwen-VL CPU video preprocessing uses FastQwen2VL/Qwen3VLVideoProcessor (torch.equal) "
        "after SGLang's own frame sampling and resize"
    )

    def not_needed(self) -> str | None:
        if getattr(module(QWEN_VL), "QwenVLImageProcessor", None) is None:
            return f"{QWEN_VL} has no QwenVLImageProcessor"
        return None

    def contract(self) -> str | None:
        cls = module(QWEN_VL).QwenVLImageProcessor
        if not callable(cls.__dict__.get("__init__")):
            return "structure: QwenVLImageProcessor defines no __init__"
        return None

    def apply(self, ctx: PatchContext) -> None:
        proc = module(QWEN_VL)
        require(proc, "QwenVLImageProcessor")
        cls = proc.QwenVLImageProcessor
        original = cls.__dict__.get("__init__")
        if not callable(original):
            raise LookupError("QwenVLImageProcessor defines no __init__ (renamed?)")
        from ...adapters import qwen_video_twin as video_adapter

        ctx.set_attr(video_adapter.SWITCHES, self.name, True)
        ctx.set_attr(cls, "__init__", _make_init(original))
