"""vLLM ``vllm.model_executor.models.kimi_k25``: Kimi K2.5/K2.6 use our fused CPU processor.

Why: before vLLM 0.25.0, ``KimiK25ProcessingInfo.__init__`` loads the checkpoint's own image
processor (remote code through ``AutoImageProcessor``), whose per-image numpy pad/normalize/
patchify is the slow part of Kimi request preprocessing. vLLM 0.25.0 (PR vllm-project/vllm#47416)
switched to a fused numba processor; our ``FusedKimiProcessor`` gives the same bytes as the
checkpoint's arithmetic and is faster still on few cores.

How: ``kimi_k25`` binds ``cached_get_image_processor`` at import time and calls it in
``KimiK25ProcessingInfo.__init__`` (stored as ``self.image_processor`` and handed to
``KimiK25Processor``). The patch rebinds that
name in ``kimi_k25`` only, to a loader returning ``FastpathKimiVisionProcessor`` (a
``BaseImageProcessor`` delegating to ``FusedKimiProcessor``), through vLLM's own loader with
``processor_cls_overrides`` when the ``vllm-processor-cls-overrides`` patch gave it one, else by
``from_pretrained`` with its own cache. The model registry keeps its class objects; no class is
replaced. If our processor cannot be built from the checkpoint (no ``media_proc_cfg``), the
loader logs once and returns what vLLM's original loader returns.

Upstream: vllm-project/vllm#47416 (first release 0.25.0). Applies to vLLM >=0.19 (open-ended); on
0.25+ (``KimiK25FusedVisionProcessor`` present) it reports ``upstream`` and the
``vllm-kimi-fused-processor`` patch takes over. Not 0.15–0.18: there the processor is kept as
``self.media_processor`` of a ``MoonshotKimiVAutoProcessor``, and
``KimiK25MultiModalProcessor.split_video_chunks`` (which ``chat_utils`` calls for every Kimi
video) calls ``info.media_processor.split_video_chunks``, a method of the checkpoint's
remote-code processor that our adapter does not have: Kimi videos would lose their chunking.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...._log import get_logger
from ...core.base import Patch, PatchContext
from ...core.registry import register
from .transformers_utils_processor import PROCESSOR, accepts_overrides

KIMI_K25 = "vllm.model_executor.models.kimi_k25"
logger = get_logger("vlm_fastpath.patches")


def make_kimi_loader(original: Any) -> Any:
    """A ``cached_get_image_processor`` for ``kimi_k25`` that returns our adapter."""
    from ...adapters.kimi_vision import FastpathKimiVisionProcessor

    @functools.lru_cache
    def load_own(processor_name: str, revision: str | None, trust_remote_code: bool) -> Any:
        module = sys.modules.get(PROCESSOR)
        convert = getattr(module, "convert_model_repo_to_path", None)
        path = convert(processor_name) if convert is not None else processor_name
        return FastpathKimiVisionProcessor.from_pretrained(
            path, revision=revision, trust_remote_code=trust_remote_code
        )

    def cached_get_image_processor(
        processor_name: str,
        *args: Any,
        revision: str | None = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> Any:
        try:
            module = sys.modules.get(PROCESSOR)
            loader = getattr(module, "cached_get_image_processor", None)
            getter = getattr(module, "get_image_processor", None)
            if loader is not None and getter is not None and accepts_overrides(getter):
                processor = loader(
                    processor_name,
                    *args,
                    revision=revision,
                    trust_remote_code=trust_remote_code,
                    processor_cls_overrides=FastpathKimiVisionProcessor,
                    **kwargs,
                )
            else:
                processor = load_own(processor_name, revision, trust_remote_code)
            if isinstance(processor, FastpathKimiVisionProcessor):
                # The checkpoint's processor answers a call whose fast path faulted.
                processor.bind_engine(KimiK25ProcessorPatch.name, functools.partial(
                    original, processor_name, *args, revision=revision,
                    trust_remote_code=trust_remote_code, **kwargs,
                ))
            return processor
        except Exception as exc:  # noqa: BLE001 - fall back to vLLM's own processor
            logger.warning(
                "vlm_fastpath: Kimi fast processor unavailable for %s (%s: %s); "
                "using vLLM's image processor",
                processor_name,
                type(exc).__name__,
                exc,
            )
            return original(
                processor_name,
                *args,
                revision=revision,
                trust_remote_code=trust_remote_code,
                **kwargs,
            )

    cached_get_image_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    cached_get_image_processor.cache_clear = load_own.cache_clear  # type: ignore[attr-defined]
    return cached_get_image_processor


@register
class KimiK25ProcessorPatch(Patch):
    name = "vllm-kimi-processor"
    engine = "vllm"
    versions = ">=0.19"  # 0.15-0.18 call media_processor.split_video_chunks (not ours)
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "vllm-project/vllm#47416"
    summary = "KimiK25ProcessingInfo loads FusedKimiProcessor instead of the checkpoint's"
    models = {"KimiK25ForConditionalGeneration": ""}
    # loads through get_image_processor(processor_cls_overrides=) when that patch gave it one
    after = ("vllm-processor-cls-overrides",)

    def upstream_equivalent(self) -> str | None:
        module = sys.modules[KIMI_K25]
        if hasattr(module, "KimiK25FusedVisionProcessor"):
            return (
                "vLLM ships a fused Kimi processor (#47416); "
                "vllm-kimi-fused-processor replaces it"
            )
        return None

    def not_needed(self) -> str | None:
        if not hasattr(sys.modules[KIMI_K25], "KimiK25ProcessingInfo"):
            return f"{KIMI_K25} has no KimiK25ProcessingInfo"
        return None

    def apply(self, ctx: PatchContext) -> None:
        module = sys.modules[KIMI_K25]
        original = module.__dict__.get("cached_get_image_processor")
        if original is None or not callable(original):
            raise LookupError(f"{KIMI_K25} has no cached_get_image_processor (renamed?)")
        from ...adapters.switches import SWITCHES

        ctx.set_attr(SWITCHES, self.name, True)  # processors it loaded answer with vLLM's after
        ctx.set_attr(module, "cached_get_image_processor", make_kimi_loader(original))
