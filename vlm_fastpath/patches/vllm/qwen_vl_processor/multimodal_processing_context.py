"""vLLM ``vllm.multimodal.processing.context``: every model's Qwen-VL image processor is ours.

``InputProcessingContext.get_hf_processor`` is where vLLM resolves the HF processor for any
model (each model's ``ProcessingInfo.get_hf_processor`` ends there, through the cached processor
getter), and ``InputProcessingContext.call_hf_processor`` is the door every HF processor call
goes through, also for processors a model builds itself (OpenCUA) or loads its own way
(LLaVA-OneVision-2). Both hand the processor on as its view whose ``image_processor`` is the
exact twin (``adapters.hand_out.serve``) wherever it holds a class we mirror, whatever model
holds it; the cached object itself is never modified, so a revert gives vLLM its originals
back at once, and a twin already handed out answers with vLLM's code after it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import register

CONTEXT = "vllm.multimodal.processing.context"
CLASS = "InputProcessingContext"
VERSIONS = ">=0.22"
DEVICE_NOTE = ("vLLM preprocesses on {device} (mm_processor_kwargs device, "
               "--mm-processor-device): transformers answers on the device")


# The architectures vLLM 0.34 serves with transformers' Qwen-VL image processor (video too where
# they take video), each verified by tests/engines/vllm/test_qwen_reach.py; older releases
# register a subset.
VIDEO_MODELS = (
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Qwen2_5OmniForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration", "ClefOmniForJointSchema", "ClefFlashForJointSchema",
    "D3ForSequenceClassification", "JinaVLForRanking", "ColQwen3", "OpsColQwen3Model",
    "Qwen3VLNemotronEmbedModel", "ColQwen3_5", "Cosmos3ForConditionalGeneration",
    "Lfm3VlForConditionalGeneration", "Exaone4_5_ForConditionalGeneration",
    "HCXVisionV2ForCausalLM",
)
IMAGE_MODELS = (*VIDEO_MODELS, "Alpamayo2Super", "DotsOCRForCausalLM",
                "OpenCUAForConditionalGeneration")
_REMOTE = ("its processor is the checkpoint's remote code: ours wherever it holds "
           "transformers' Qwen-VL {} processor (not verified offline)")


def model_table(kind: str, served: tuple[str, ...]) -> dict[str, str]:
    remote = ("LlavaOnevision2ForConditionalGeneration", "InternS1ProForConditionalGeneration",
              "InternS2PreviewForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
              "BailingMoeV3VLForConditionalGeneration", "OpenPanguVLForConditionalGeneration")
    return {**dict.fromkeys(served, ""), **dict.fromkeys(remote, _REMOTE.format(kind))}


def model_of(ctx: Any) -> tuple[str, Any]:
    """The served architecture(s) and the device vLLM asks its processor for (or None)."""
    try:
        config = ctx.model_config
    except Exception:  # noqa: BLE001 - a context without a model config: no name
        return "", None
    archs = getattr(config, "architectures", None)
    if not archs:
        archs = getattr(getattr(config, "hf_config", None), "architectures", None) or ()
    device = None
    try:
        kwargs = getattr(config.multimodal_config, "mm_processor_kwargs", None) or {}
        device = kwargs.get("device")
    except Exception:  # noqa: BLE001 - not a multimodal model: no device
        pass
    return ",".join(archs), device


def make_wrappers(get: Any, call: Any, kind_module: str, patch: str) -> tuple[Any, Any]:
    """``get_hf_processor`` and ``call_hf_processor`` that hand on the view (``kind_module``:
    the adapter module whose ``KIND`` twins are handed out)."""
    import importlib

    kind = importlib.import_module(f"vlm_fastpath.patches.adapters.{kind_module}").KIND
    from ...adapters.hand_out import serve

    def hand_out(ctx: Any, processor: Any) -> Any:
        model, device = model_of(ctx)
        return serve(processor, kind, patch, model=model, device=device,
                     device_note=DEVICE_NOTE.format(device=device))

    @functools.wraps(get)
    def get_hf_processor(self: Any, *args: Any, **kwargs: Any) -> Any:
        return hand_out(self, get(self, *args, **kwargs))

    @functools.wraps(call)
    def call_hf_processor(self: Any, hf_processor: Any, *args: Any, **kwargs: Any) -> Any:
        return call(self, hand_out(self, hf_processor), *args, **kwargs)

    get_hf_processor.__vlm_fastpath_original__ = get  # type: ignore[attr-defined]
    call_hf_processor.__vlm_fastpath_original__ = call  # type: ignore[attr-defined]
    return get_hf_processor, call_hf_processor


class ProcessingContextPatch(Patch):
    """Wrap ``InputProcessingContext.get_hf_processor`` and ``.call_hf_processor`` (shared by
    the image and video patches, which stack on the same two attributes)."""

    engine = "vllm"
    versions = VERSIONS
    backport = False
    trigger = CONTEXT
    modules = (CONTEXT,)
    upstream_pr = ""
    kind_module = "qwen_twin"

    def _context(self) -> Any:
        return getattr(sys.modules[CONTEXT], CLASS, None)

    def not_needed(self) -> str | None:
        if self._context() is None:
            return f"{CONTEXT} has no {CLASS}"
        return None

    def contract(self) -> str | None:
        """Structure here; behaviour per processor object and settings, before its twin is
        handed out and again when its settings change (``adapters.twins``: the probes of
        ``check_compatible``/``check_video_compatible``; where they differ the engine's
        processor is handed out and the status says why, per model)."""
        context = self._context()
        return (signature_clause(context, "get_hf_processor", ("self", "typ", "**"))
                or signature_clause(context, "call_hf_processor",
                                    ("self", "hf_processor", "data")))

    def apply(self, ctx: PatchContext) -> None:
        context = self._context()
        get = context.__dict__.get("get_hf_processor")
        call = context.__dict__.get("call_hf_processor")
        if not (callable(get) and callable(call)):
            raise LookupError(f"{CLASS} lacks get_hf_processor/call_hf_processor (renamed?)")
        from ...adapters.switches import SWITCHES

        wrapped_get, wrapped_call = make_wrappers(get, call, self.kind_module, self.name)
        ctx.set_attr(SWITCHES, self.name, True)
        ctx.set_attr(context, "get_hf_processor", wrapped_get)
        ctx.set_attr(context, "call_hf_processor", wrapped_call)


@register
class QwenVLImageProcessorPatch(ProcessingContextPatch):
    name = "vllm-qwen-vl-image-processor"
    kind_module = "qwen_twin"
    models = model_table("image", IMAGE_MODELS)
    summary = ("Qwen-VL image processors (Qwen2VLImageProcessor, Pil, Fast) of every model use "
               "FastQwen2VLImageProcessor (torch.equal, faster)")
