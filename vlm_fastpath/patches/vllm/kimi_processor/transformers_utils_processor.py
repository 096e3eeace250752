"""vLLM ``vllm.transformers_utils.processor``: give ``get_image_processor`` a class override.

Why: vLLM 0.25.0 (PR vllm-project/vllm#47416) added ``processor_cls_overrides`` to
``get_image_processor`` so a model can load its image processor with a class of its choosing
(the fused Kimi processor) instead of ``AutoImageProcessor`` + remote code. Releases before it
(0.15–0.24) have no such argument, so nothing (our Kimi patch included) can ask vLLM's loader
for another class.

How: replace ``get_image_processor`` with a function that takes ``processor_cls_overrides=None``
and otherwise calls the original unchanged, and ``cached_get_image_processor`` with an
``lru_cache`` of it, rebinding every ``from ... import`` copy under ``vllm.``. Without an
override the new functions return exactly what vLLM's did. ``revert`` restores the originals,
including copies taken by modules imported while the patch was active.

Upstream: vllm-project/vllm#47416 (first release 0.25.0). Applies to vLLM >=0.19, open-ended
(its only user, our Kimi loader, needs 0.19+: the release sweep found 0.15-0.18 call the processor's
``split_video_chunks``); on 0.25+
the signature already has the argument and the patch reports ``upstream``.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from ...core.base import Patch, PatchContext
from ...core.registry import register

PROCESSOR = "vllm.transformers_utils.processor"


def accepts_overrides(func: Any) -> bool:
    """True if ``func`` takes ``processor_cls_overrides``."""
    try:
        return "processor_cls_overrides" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def make_get_image_processor(module: Any, original: Any) -> Any:
    """``get_image_processor`` with a ``processor_cls_overrides`` argument (vLLM 0.25 style)."""

    def get_image_processor(
        processor_name: str,
        *args: Any,
        revision: str | None = None,
        trust_remote_code: bool = False,
        processor_cls_overrides: type | None = None,
        **kwargs: Any,
    ) -> Any:
        if processor_cls_overrides is None:
            return original(
                processor_name,
                *args,
                revision=revision,
                trust_remote_code=trust_remote_code,
                **kwargs,
            )
        convert = getattr(module, "convert_model_repo_to_path", None)
        if convert is not None:
            processor_name = convert(processor_name)
        return processor_cls_overrides.from_pretrained(
            processor_name,
            *args,
            revision=revision,
            trust_remote_code=trust_remote_code,
            **kwargs,
        )

    get_image_processor.__module__ = original.__module__
    get_image_processor.__doc__ = original.__doc__
    get_image_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return get_image_processor


@register
class ProcessorClsOverridesPatch(Patch):
    name = "vllm-processor-cls-overrides"
    engine = "vllm"
    versions = ">=0.19"  # only our Kimi loader uses it, and that needs 0.19+
    trigger = PROCESSOR
    modules = (PROCESSOR,)
    upstream_pr = "vllm-project/vllm#47416"
    summary = "get_image_processor accepts processor_cls_overrides (as in vLLM 0.25+)"

    def upstream_equivalent(self) -> str | None:
        module = sys.modules[PROCESSOR]
        func = getattr(module, "get_image_processor", None)
        if func is not None and accepts_overrides(func):
            return "vLLM's get_image_processor already takes processor_cls_overrides (#47416)"
        return None

    def apply(self, ctx: PatchContext) -> None:
        module = sys.modules[PROCESSOR]
        original = getattr(module, "get_image_processor", None)
        original_cached = getattr(module, "cached_get_image_processor", None)
        if original is None or original_cached is None:
            raise LookupError(
                f"{PROCESSOR} has no get_image_processor/cached_get_image_processor (renamed?)"
            )
        if getattr(original_cached, "__wrapped__", None) is not original:
            raise LookupError(
                f"{PROCESSOR}.cached_get_image_processor is not lru_cache(get_image_processor)"
            )
        replacement = make_get_image_processor(module, original)
        cached = functools.lru_cache(replacement)
        ctx.rebind_globals(original, replacement, ("vllm.",))
        ctx.rebind_globals(original_cached, cached, ("vllm.",))
        if module.get_image_processor is not replacement:
            raise LookupError(f"could not rebind {PROCESSOR}.get_image_processor")
