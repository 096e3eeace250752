"""SGLang tokenizer process: Qwen-VL image items leave our processor with each patch once.

sglang-qwen-compact-image-rows
    ``BaseMultimodalProcessor.__init__`` (every model's multimodal processor, built once per
    tokenizer process) decides per processor whether its image items may be compact: the
    served architecture is one whose model class expands them (``models_qwen_vl``, applied in
    this process: SGLang's Qwen-VL processor module imports those model classes), our image
    processor serves its calls (SGLang's CPU path), and every process that runs the vision
    tower is started from this node by this launch (one node; no encoder disaggregation, whose
    encoder servers are other installations). ``process_mm_data`` (the door of every HF
    processor call, run by SGLang's processor worker threads) and ``prepare_artifact_batch``
    (0.5.20+: the image-artifact cache's direct call of the image processor) then run inside
    ``compact.emitting()``: our processor writes one temporal copy. A call transformers answers
    (SGLang's GPU path, a setting ours stands aside for) keeps its full rows; the model side
    takes both forms. The status says per model why not.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...._log import get_logger
from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import REGISTRY, register
from .._common import module
from ..qwen_vl_processor.multimodal_processors_base_processor import (
    PATCH as IMAGE_PATCH,
)
from ..qwen_vl_processor.multimodal_processors_base_processor import (
    model_of,
    preprocessing_device,
)

logger = get_logger("vlm_fastpath.patches")

BASE = "sglang.srt.multimodal.processors.base_processor"
QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl"
PATCH = "sglang-qwen-compact-image-rows"
FLAG = "_vlm_fastpath_compact_rows"
_MODELS = "sglang.srt.models."
# Served architecture -> (the module of the class whose get_image_feature expands, the patch).
ARCHS: dict[str, tuple[str, str]] = {
    "Qwen2VLForConditionalGeneration": (_MODELS + "qwen2_vl", "sglang-qwen2-vl-compact-rows"),
    "Qwen2_5_VLForConditionalGeneration":
        (_MODELS + "qwen2_5_vl", "sglang-qwen2-5-vl-compact-rows"),
    "Qwen3VLForConditionalGeneration": (_MODELS + "qwen3_vl", "sglang-qwen3-vl-compact-rows"),
    "Qwen3VLMoeForConditionalGeneration":
        (_MODELS + "qwen3_vl_moe", "sglang-qwen3-vl-compact-rows"),
}
_NOT_COVERED = ("its model is not one whose compact image rows vlm-fastpath expands: the full "
                "rows are sent")


def topology_clause(server_args: Any) -> str:
    """Empty where every process that runs the vision tower is started from this node by this
    launch (so from this installation), else why the full rows must be sent."""
    nnodes = int(getattr(server_args, "nnodes", 1) or 1)
    if nnodes > 1:
        return f"nnodes={nnodes}: schedulers on other nodes may run without the expansion"
    for flag in ("encoder_only", "language_only"):
        if getattr(server_args, flag, False):
            return (f"{flag}: encoder disaggregation sends items to encoder servers that may "
                    "run without the expansion")
    return ""


def _expands(arch: str) -> str:
    """Empty where ``arch``'s model class runs our expanding ``get_image_feature``."""
    module_name, patch = ARCHS[arch]
    model = getattr(sys.modules.get(module_name), arch, None)
    if model is None:
        return f"{module_name}.{arch} is not loaded"
    if patch not in REGISTRY.installed():
        return f"{patch} is not applied in this process"
    if getattr(model.get_image_feature, "__vlm_fastpath_original__", None) is None:
        return f"{arch}.get_image_feature is not the expanding one (overridden?)"
    return ""


def why_full(mm: Any) -> str:
    """Empty where this processor's image items may be compact, else why not."""
    from ....settings import cpu_preprocess

    arch = model_of(mm)
    if arch not in ARCHS:
        return _NOT_COVERED
    reason = _expands(arch)
    if not reason and IMAGE_PATCH not in REGISTRY.installed():
        reason = f"{IMAGE_PATCH} is not applied: no processor of ours writes compact rows"
    if not reason:
        device = preprocessing_device(mm)
        if device not in (None, "cpu") and not cpu_preprocess():
            reason = (f"SGLang preprocesses on {device} with transformers' processor: its "
                      "full rows are sent")
    if not reason:
        reason = topology_clause(getattr(mm, "server_args", None))
    return reason


def make_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            reason = why_full(self)
        except Exception as exc:  # noqa: BLE001 - unread settings: full rows, never a crash
            reason = f"settings not read ({exc!r}): full rows"
        self.__dict__[FLAG] = not reason
        arch = model_of(self)
        if arch in ARCHS:
            REGISTRY.note_model(PATCH, arch, reason)

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


def make_emitting(original: Any) -> Any:
    """``original`` run inside ``compact.emitting()`` for a processor marked compact."""
    from vlm_fastpath.qwen_integration import compact

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.__dict__.get(FLAG):
            return original(self, *args, **kwargs)
        with compact.emitting():
            return original(self, *args, **kwargs)

    call.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return call


@register
class QwenCompactTokenizerPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"
    backport = False
    # SGLang's Qwen-VL processor module: it imports the base class and the model classes
    trigger = QWEN_VL
    modules = (BASE, QWEN_VL)
    upstream_pr = "vllm-project/vllm#44787"
    # Outermost on __init__: the decision reads what the image patch handed out.
    after = (IMAGE_PATCH, "sglang-qwen-vl-cpu-video-processor")
    requires = (IMAGE_PATCH,)
    summary = ("Qwen2/2.5/3-VL image items carry each patch once on SGLang's CPU path (the "
               "model expands them: torch.equal)")

    def _base(self) -> Any:
        return getattr(module(BASE), "BaseMultimodalProcessor", None)

    def not_needed(self) -> str | None:
        if self._base() is None:
            return f"{BASE} has no BaseMultimodalProcessor"
        return None

    def contract(self) -> str | None:
        return signature_clause(self._base(), "process_mm_data", ("self", "input_text"))

    def apply(self, ctx: PatchContext) -> None:
        base = self._base()
        init = base.__dict__.get("__init__")
        call = base.__dict__.get("process_mm_data")
        if not (callable(init) and callable(call)):
            raise LookupError("BaseMultimodalProcessor.__init__ or process_mm_data is not on "
                              "its class")
        ctx.set_attr(base, "__init__", make_init(init))
        ctx.set_attr(base, "process_mm_data", make_emitting(call))
        qwen = getattr(sys.modules.get(QWEN_VL), "QwenVLImageProcessor", None)
        artifacts = getattr(qwen, "__dict__", {}).get("prepare_artifact_batch")
        if callable(artifacts):
            ctx.set_attr(qwen, "prepare_artifact_batch", make_emitting(artifacts))
