"""vLLM API server: Qwen-VL image items leave the processor with each patch once.

``InputProcessor.__init__`` (every API server process and the offline ``LLM`` build one from
the ``VllmConfig``) records whether every engine process runs from this node, and
``InputProcessingContext.call_hf_processor`` (the door of every HF processor call) asks our
processor for compact rows, and cuts a full answer (transformers', where ours stood aside for a
call) to its first temporal copy, so every image item of a served model has one layout and
vLLM's batching concatenates them as before. The per-model verdict is recorded in the status.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from ...._log import get_logger
from ...core.base import Patch, PatchContext, signature_clause, source_text
from ...core.registry import REGISTRY, register
from ..qwen_vl_processor.multimodal_processing_context import model_of

logger = get_logger("vlm_fastpath.patches")

INPUT_PROCESSOR = "vllm.v1.engine.input_processor"
CONTEXT = "vllm.multimodal.processing.context"
PATCH = "vllm-qwen-compact-image-rows"
GUARD = "vllm-qwen-compact-mixed-batch"
_MODELS = "vllm.model_executor.models."
# Served architecture -> (its module, the tower it builds, the patch that makes it expand).
ARCHS: dict[str, tuple[str, str, str]] = {
    "Qwen2VLForConditionalGeneration":
        (_MODELS + "qwen2_vl", "Qwen2VisionTransformer", "vllm-qwen2-vl-compact-rows"),
    "Qwen2_5_VLForConditionalGeneration":
        (_MODELS + "qwen2_5_vl", "Qwen2_5_VisionTransformer", "vllm-qwen2-5-vl-compact-rows"),
    "Qwen3VLForConditionalGeneration":
        (_MODELS + "qwen3_vl", "Qwen3_VisionTransformer", "vllm-qwen3-vl-compact-rows"),
    "Qwen3VLMoeForConditionalGeneration":
        (_MODELS + "qwen3_vl_moe", "Qwen3_VisionTransformer", "vllm-qwen3-vl-compact-rows"),
}
_NOT_TOWER = ("its vision tower is not one whose compact rows vlm-fastpath expands: the full "
              "rows are sent")

_lock = threading.Lock()
# id(model_config) -> (model_config, "" where every engine process runs from this node, else
# why not); the object is kept so that a reused id cannot pass for it.
_TOPOLOGY: dict[int, tuple[Any, str]] = {}


def topology_clause(vllm_config: Any) -> str:
    """Empty where every process that runs the vision tower is started from this node (so
    from this installation), else why the full rows must be sent."""
    parallel = vllm_config.parallel_config
    nnodes = int(getattr(parallel, "nnodes", 1) or 1)
    if nnodes > 1:
        return f"nnodes={nnodes}: workers on other nodes may run without the expansion"
    size = int(getattr(parallel, "data_parallel_size", 1) or 1)
    local = int(getattr(parallel, "data_parallel_size_local", size))
    own_engines = (getattr(parallel, "data_parallel_external_lb", False)
                   or getattr(parallel, "data_parallel_hybrid_lb", False))
    if local < size and not own_engines:
        return (f"data_parallel_size_local={local} < data_parallel_size={size}: engine cores "
                "on other nodes may run without the expansion")
    backend = getattr(parallel, "distributed_executor_backend", None)
    if "ray" in str(getattr(backend, "__name__", backend)).lower():
        return "the Ray executor may place workers on other nodes"
    if getattr(getattr(vllm_config, "compilation_config", None), "cudagraph_mm_encoder", False):
        return "encoder CUDA graphs copy pixel_values into a full-width captured buffer"
    return ""


def record(vllm_config: Any) -> None:
    model_config = vllm_config.model_config
    clause = topology_clause(vllm_config)
    with _lock:
        _TOPOLOGY[id(model_config)] = (model_config, clause)


def forget() -> None:
    """Drop every recorded topology (tests)."""
    with _lock:
        _TOPOLOGY.clear()


_BUILDS_TOWER: set[str] = set()  # architectures whose model class was seen building its tower


def _tower_clause(arch: str) -> str:
    """Empty where ``arch``'s model class builds the tower that expands (remembered once true;
    a model module not loaded yet is asked again on the next call)."""
    if arch in _BUILDS_TOWER:
        return ""
    module_name, tower, _ = ARCHS[arch]
    model = getattr(sys.modules.get(module_name), arch, None)
    if model is None:
        return f"{module_name}.{arch} is not loaded"
    if not any(f"{tower}(" in source_text(klass.__init__) for klass in type.mro(model)
               if "__init__" in klass.__dict__):
        return f"{arch} does not build {tower}"
    _BUILDS_TOWER.add(arch)
    return ""


def why_full(ctx: Any) -> str:
    """Empty where this context's model gets compact rows, else why the full rows are sent."""
    arch, _ = model_of(ctx)  # the image patch's reading of the served architecture(s)
    if arch not in ARCHS:
        return _NOT_TOWER
    config = ctx.model_config
    reason = _tower_clause(arch)
    installed = REGISTRY.installed() if not reason else []
    for needed in (ARCHS[arch][2], GUARD):
        if not reason and needed not in installed:
            reason = f"{needed} is not applied in this process"
    if not reason:
        seen = _TOPOLOGY.get(id(config))
        if seen is None or seen[0] is not config:
            reason = "no InputProcessor was built for this model config (topology unknown)"
        else:
            reason = seen[1]
    REGISTRY.note_model(PATCH, arch, reason)
    return reason


def _geometry(ctx: Any, hf_processor: Any) -> tuple[int, int, int] | None:
    image_processor = getattr(hf_processor, "image_processor", None)
    temporal = getattr(image_processor, "temporal_patch_size", None)
    patch = getattr(image_processor, "patch_size", None)
    if not (isinstance(temporal, int) and isinstance(patch, int)):
        return None
    vision = getattr(getattr(ctx.model_config, "hf_config", None), "vision_config", None)
    return int(getattr(vision, "in_channels", 3) or 3), temporal, patch


def compact_rows(out: Any, geometry: tuple[int, int, int] | None) -> Any:
    """``out`` with its image rows compact (ours wrote them so; a full answer is cut)."""
    import torch

    from vlm_fastpath.qwen_integration import compact

    pixel_values = out.get("pixel_values") if hasattr(out, "get") else None
    if geometry is None or not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 2:
        return out
    channels, temporal, patch = geometry
    if temporal < 2 or pixel_values.shape[1] != channels * temporal * patch * patch:
        return out  # compact already (ours), or not rows of this geometry
    cut = compact.compact(pixel_values, channels, temporal, patch)
    if cut is None:
        logger.warning("vlm_fastpath: %s: an image's temporal copies differ; its full rows "
                       "are sent", PATCH)
        return out
    out["pixel_values"] = cut
    return out


def make_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, *args, **kwargs)
        try:
            record(vllm_config)
        except Exception as exc:  # noqa: BLE001 - unknown topology: full rows, never a crash
            logger.warning("vlm_fastpath: %s: topology not read (%s): full rows", PATCH, exc)

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


def make_call(original: Any) -> Any:
    from vlm_fastpath.qwen_integration import compact

    @functools.wraps(original)
    def call_hf_processor(self: Any, hf_processor: Any, *args: Any, **kwargs: Any) -> Any:
        if why_full(self):
            return original(self, hf_processor, *args, **kwargs)
        with compact.emitting():
            out = original(self, hf_processor, *args, **kwargs)
        return compact_rows(out, _geometry(self, hf_processor))

    call_hf_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return call_hf_processor


@register
class QwenCompactFrontendPatch(Patch):
    name = PATCH
    engine = "vllm"
    versions = ">=0.22"
    backport = False
    trigger = INPUT_PROCESSOR
    modules = (INPUT_PROCESSOR, CONTEXT)
    upstream_pr = "vllm-project/vllm#44787"
    # Outermost on call_hf_processor: it sees the answer the image patch's twin gave. Our
    # processor writes the compact rows; without it there is nothing of ours to ask.
    after = ("vllm-qwen-vl-image-processor", "vllm-qwen-vl-video-processor")
    requires = ("vllm-qwen-vl-image-processor",)
    summary = ("Qwen2/2.5/3-VL image items carry each patch once (the tower expands them: "
               "torch.equal)")

    @staticmethod
    def _classes() -> tuple[Any, Any]:
        processor = getattr(sys.modules[INPUT_PROCESSOR], "InputProcessor", None)
        context = getattr(sys.modules.get(CONTEXT), "InputProcessingContext", None)
        return processor, context

    def not_needed(self) -> str | None:
        processor, context = self._classes()
        if processor is None or context is None:
            return f"no {INPUT_PROCESSOR}.InputProcessor or {CONTEXT}.InputProcessingContext"
        return None

    def contract(self) -> str | None:
        processor, context = self._classes()
        return (signature_clause(processor, "__init__", ("self", "vllm_config"))
                or signature_clause(context, "call_hf_processor",
                                    ("self", "hf_processor", "data")))

    def apply(self, ctx: PatchContext) -> None:
        processor, context = self._classes()
        init = processor.__dict__.get("__init__")
        call = context.__dict__.get("call_hf_processor")
        if not (callable(init) and callable(call)):
            raise LookupError("InputProcessor.__init__ or call_hf_processor is not on its class")
        ctx.set_attr(processor, "__init__", make_init(init))
        ctx.set_attr(context, "call_hf_processor", make_call(call))
