"""Patch of ``sglang.srt.multimodal.processors.base_processor``: Qwen-VL images through our twin.

sglang-qwen-vl-cpu-image-processor
    Why: SGLang preprocesses Qwen-VL images in the tokenizer process with transformers'
    ``Qwen2VLImageProcessor`` (``process_mm_data``; 0.5.23 also calls the image processor for
    its artifact cache); ours gives the same ``pixel_values``/``image_grid_thw`` faster.
    How: ``BaseMultimodalProcessor.__init__`` (every model's multimodal processor) receives
    its HF processor as a view whose ``image_processor`` is the exact twin, wherever it holds a
    class we mirror, whatever model holds it; after it, the status is recorded per model and
    the decode layer is offered the twin (``adapters.hand_out.serve``). The view goes in first
    because the processor worker pool (``--mm-processor-worker-num``) built there runs each
    worker on a ``deepcopy`` of it (0.5.17-0.5.19 clone it there and then): a twin's copy is a
    twin. Calls with a device (SGLang's GPU preprocessing) go to
    transformers unless ``VLM_FASTPATH_CPU_PREPROCESS=1``; the status says so per model, and
    no decode work is started for a processor that will not take it. Processors built while
    the patch was applied keep the view after a revert, but the twin then answers with
    transformers' code.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import register
from .._common import module, require

BASE = "sglang.srt.multimodal.processors.base_processor"
CLASS = "BaseMultimodalProcessor"
PATCH = "sglang-qwen-vl-cpu-image-processor"
DEVICE_NOTE = ("SGLang preprocesses on {device} (its GPU path: transformers' fast processor, "
               "JPEGs by nvJPEG); VLM_FASTPATH_CPU_PREPROCESS=1 puts vlm-fastpath's exact CPU "
               "path in its place, or --image-processor-backend pil keeps SGLang on the CPU")


# The architectures SGLang 0.5.23 serves with transformers' Qwen-VL image processor, each
# verified by tests/engines/sglang/test_qwen_reach.py (videos: the Qwen-VL processor's).
IMAGE_MODELS = (
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration",
    "Cosmos3ForConditionalGeneration", "DotsOCRForCausalLM",
)
VIDEO_MODELS = ("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                "Qwen3VLForConditionalGeneration")
UNVERIFIED = ("InternS2PreviewForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
              "DotsVLMForCausalLM")


def model_table(kind: str, served: tuple[str, ...]) -> dict[str, str]:
    why = (f"its processor is the checkpoint's remote code: ours wherever it holds "
           f"transformers' Qwen-VL {kind} processor (not verified offline)")
    return {**dict.fromkeys(served, ""), **dict.fromkeys(UNVERIFIED, why)}


def preprocessing_device(mm: Any) -> str | None:
    """The device this release asks the HF image processor for (None: none named), read
    without side effects (on Ascend NPUs the release's own choice patches transformers)."""
    base = sys.modules.get(BASE)
    if getattr(mm, "disable_fast_image_processor", False) or getattr(
            getattr(mm, "server_args", None), "disable_fast_image_processor", False):
        return None
    if getattr(base, "_is_npu", False):
        return "npu"
    choose = getattr(type(mm), "_fast_image_processor_device", None)
    if callable(choose):
        return choose(mm, mm._processor)
    # releases choosing inline in process_mm_data (0.5.12-0.5.16): the same rules
    if getattr(base, "_is_cpu", False) or getattr(
            getattr(mm, "server_args", None), "rl_on_policy_target", None) is not None:
        return "cpu"
    return "xpu" if getattr(base, "_is_xpu", False) else "cuda"


def model_of(mm: Any) -> str:
    """The architecture(s) the processor serves, as the status names them; a processor that
    keeps a sub-config (Qwen3-Omni's thinker) names its class and that config's model type."""
    config = getattr(mm, "hf_config", None)
    archs = getattr(config, "architectures", None)
    if archs:
        return ",".join(archs)
    return f"{type(mm).__name__}({getattr(config, 'model_type', '?')})"


class GpuImageDecode:
    """``BaseMultimodalProcessor.gpu_image_decode`` (default True: nvJPEG on CUDA), False for a
    processor class whose processors hand out our image twin while
    ``VLM_FASTPATH_CPU_PREPROCESS`` is on: exact pixels need Pillow's decode, not nvJPEG's
    (a class that sets its own value keeps it). Installed only where the switch is on when
    the patch applies."""

    def __init__(self, default: Any) -> None:
        while isinstance(default, GpuImageDecode):  # never one of ours inside another
            default = default.default
        self.default = default
        self.classes: weakref.WeakSet[type] = weakref.WeakSet()

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if cls in self.classes:
            from ....settings import cpu_preprocess

            if cpu_preprocess():
                return False
        return self.default


def _with_view(args: tuple[Any, ...], kwargs: dict[str, Any], kind: Any,
               patch: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``__init__``'s arguments with the HF processor (third, or ``_processor=``) replaced by
    its view (the status and the offer wait for the device choice, after __init__)."""
    try:
        if len(args) >= 3:
            return (*args[:2], kind.processor_view(args[2], patch), *args[3:]), kwargs
        if "_processor" in kwargs:
            return args, {**kwargs, "_processor": kind.processor_view(kwargs["_processor"],
                                                                      patch)}
    except Exception as exc:  # noqa: BLE001 - the engine keeps its processor
        from ...adapters.twins import logger

        logger.warning("vlm_fastpath: %s: keeping SGLang's processor (%r)", patch, exc)
    return args, kwargs


def make_init(original: Any, kind_module: str, patch: str,
              decode: GpuImageDecode | None = None) -> Any:
    kind = importlib.import_module(f"vlm_fastpath.patches.adapters.{kind_module}").KIND

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # The view goes in before SGLang's own __init__ runs: the processor worker pool it
        # builds there clones ``_processor`` (eagerly in 0.5.17-0.5.19), so a view handed on
        # afterwards would never reach the pool's workers.
        args, kwargs = _with_view(args, kwargs, kind, patch)
        original(self, *args, **kwargs)
        processor = self.__dict__.get("_processor")
        if processor is None:
            return
        from ...adapters.hand_out import serve

        try:
            device = preprocessing_device(self)
        except Exception:  # noqa: BLE001 - a release we cannot read: the calls decide
            device = None
        self._processor = serve(processor, kind, patch, model=model_of(self), device=device,
                                device_note=DEVICE_NOTE.format(device=device))
        if decode is not None and kind.is_twin(kind.held(self._processor)):
            decode.classes.add(type(self))

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


class BaseProcessorPatch(Patch):
    """Wrap ``BaseMultimodalProcessor.__init__`` (the image and video patches stack on it)."""

    engine = "sglang"
    versions = ">=0.5.12"  # no upper bound: the contract decides (twins are probed)
    backport = False
    trigger = BASE
    modules = (BASE,)
    upstream_pr = ""
    kind_module = "qwen_twin"

    def not_needed(self) -> str | None:
        if getattr(module(BASE), CLASS, None) is None:
            return f"{BASE} has no {CLASS}"
        return None

    def contract(self) -> str | None:
        """Structure here (the processor arrives third and is kept as ``_processor``);
        behaviour per processor class and settings (``adapters.twins``)."""
        cls = getattr(module(BASE), CLASS)
        clause = signature_clause(cls, "__init__",
                                  ("self", "hf_config", "server_args", "_processor"))
        if clause:
            return clause
        from ...core.base import source_text

        text = source_text(cls.__dict__["__init__"])
        if text and "self._processor = _processor" not in text:
            return f"structure: {CLASS}.__init__ no longer keeps the processor as _processor"
        return None

    def apply(self, ctx: PatchContext) -> None:
        base = module(BASE)
        require(base, CLASS)
        cls = getattr(base, CLASS)
        original = cls.__dict__.get("__init__")
        if not callable(original):
            raise LookupError(f"{CLASS} defines no __init__ (renamed?)")
        from ...adapters.switches import SWITCHES

        ctx.set_attr(SWITCHES, self.name, True)
        decode = None
        from ....settings import cpu_preprocess

        if (self.kind_module == "qwen_twin" and cpu_preprocess()
                and "gpu_image_decode" in cls.__dict__):
            # only with the switch on when the patch applies (a server's start): SGLang's own
            # class attribute stays untouched otherwise
            decode = GpuImageDecode(cls.__dict__["gpu_image_decode"])
            ctx.set_attr(cls, "gpu_image_decode", decode)
        ctx.set_attr(cls, "__init__", make_init(original, self.kind_module, self.name, decode))


@register
class QwenVLCpuImageProcessorPatch(BaseProcessorPatch):
    name = PATCH
    kind_module = "qwen_twin"
    models = model_table("image", IMAGE_MODELS)
    summary = ("Qwen-VL image processors (Qwen2VLImageProcessor, Pil, Fast) of every model use "
               "FastQwen2VLImageProcessor on the CPU path (torch.equal)")
