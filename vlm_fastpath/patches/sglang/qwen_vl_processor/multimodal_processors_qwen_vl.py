"""Patch of ``sglang.srt.multimodal.processors.qwen_vl`` (Qwen-VL request preprocessing).

sglang-qwen-vl-cpu-image-processor
    Why: on the CPU path SGLang's ``QwenVLImageProcessor`` runs transformers' Qwen2-VL image
    processor per request; ours gives the same ``pixel_values``/``image_grid_thw`` faster.
    How: after ``QwenVLImageProcessor.__init__`` its ``_processor`` (what ``process_mm_data``
    and 0.5.23's ``prepare_artifact_batch`` call) is a view of the HF processor whose
    ``image_processor`` is the exact twin; the tokenizer, the video processor and the HF
    processor object SGLang holds elsewhere are untouched. The twin answers calls on the CPU
    (``device`` None or "cpu") and hands every other device (GPU preprocessing) to
    transformers. Processors built while the patch was applied keep the view after a revert,
    but the twin then answers with transformers' code.
"""

from __future__ import annotations

import functools
from typing import Any

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require

QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl"
PATCH = "sglang-qwen-vl-cpu-image-processor"


def _make_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            from ...adapters.qwen_twin import processor_view

            hf_processor = self.__dict__.get("_processor")
            if hf_processor is not None:
                self._processor = processor_view(hf_processor, PATCH)
        except Exception as exc:  # noqa: BLE001 - the engine keeps its processor
            from ...adapters.qwen_twin import logger

            logger.warning("vlm_fastpath: %s: keeping SGLang's processor (%r)", PATCH, exc)

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


@register
class QwenVLCpuImageProcessorPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"  # no upper bound: the contract decides (twins are probed per object)
    backport = False
    trigger = QWEN_VL
    modules = (QWEN_VL,)
    upstream_pr = ""
    summary = (
        "Qwen-VL CPU image preprocessing uses FastQwen2VLImageProcessor (torch.equal); "
        "GPU preprocessing (device cuda) stays SGLang's"
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
        from ...adapters import qwen_twin as adapter

        ctx.set_attr(adapter.SWITCHES, self.name, True)
        ctx.set_attr(cls, "__init__", _make_init(original))
