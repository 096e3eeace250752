"""Fast twins of transformers' Qwen-VL video processors, and the processor views that carry them.

A twin (:mod:`.twins`) is an instance of a subclass of our ``FastQwen2VLVideoProcessor`` or
``FastQwen3VLVideoProcessor`` (themselves subclasses of transformers' classes: ``isinstance``,
every attribute and every method the engines read stay transformers'), sharing the original's
``__dict__``: the settings at call time are the original's. Its ``preprocess`` is ours while the
patch that made it is applied and the probes proved ours equal for those settings, the
original's otherwise; an unexpected fault in ours is contained (the original answers the call,
:mod:`..core.containment`); bad input raises our ``ValueError``.

Engine-neutral (no engine import): the vLLM and SGLang patches use it.
"""

from __future__ import annotations

import functools
from typing import Any

from ..core.containment import call_contained
from .twins import TwinKind, TwinMixin, logger  # noqa: F401 - the adapters' logger

_VIDEO_CLASSES = frozenset({"Qwen2VLVideoProcessor", "Qwen3VLVideoProcessor"})


class FastpathQwenVideoProcessorMixin(TwinMixin):
    """``preprocess`` of a twin: ours while its patch is applied, else the original's."""

    __slots__ = ()

    def preprocess(self, videos: Any = None, *args: Any, **kwargs: Any) -> Any:
        engine = functools.partial(self._vlm_original.preprocess, videos, *args, **kwargs)
        if args or videos is None or not self.vlm_serves(kwargs):
            return engine()
        if self.vlm_fast() is None:
            return engine()  # these settings (changed after hand-out) are not reproduced
        fast = functools.partial(super().preprocess, videos, **kwargs)  # type: ignore[misc]
        return call_contained(self._vlm_patch, fast, engine,
                              where="FastpathQwenVideoProcessor.preprocess")

    def __call__(self, videos: Any = None, *args: Any, **kwargs: Any) -> Any:
        return self.preprocess(videos, *args, **kwargs)


@functools.cache
def twin_class(fast_class: type) -> type:
    """The twin class of one of our fast video processor classes (one per class)."""
    stands_for = fast_class.__mro__[2].__name__
    return type(
        f"Fastpath{stands_for}",
        (FastpathQwenVideoProcessorMixin, fast_class),
        {"__module__": __name__, "__slots__": (), "_vlm_kind": KIND,
         "__doc__": f"{stands_for} with vlm-fastpath's pixels."},
    )


def judge(video_processor: Any) -> tuple[Any, str]:
    """``(fast, "")`` where ours reproduces ``video_processor`` as it is now (probes run), else
    ``(None, reason)``."""
    try:
        from vlm_fastpath.qwen_integration.video_compat import check_video_compatible
        from vlm_fastpath.qwen_integration.video_processor import fast_video_processor
    except ImportError as exc:  # a transformers without the Qwen-VL video processors
        return None, f"video processors not importable: {exc}"
    try:
        fast = fast_video_processor(video_processor)
    except Exception as exc:  # noqa: BLE001 - any setting ours cannot take means stand aside
        return None, f"video processor {type(video_processor).__name__}: {exc}"
    reason = check_video_compatible(video_processor, fast)
    return (None, reason) if reason else (fast, "")


class VideoTwins(TwinKind):
    """Twins of ``Qwen2VLVideoProcessor``/``Qwen3VLVideoProcessor`` objects."""

    label = "video"
    attr = "video_processor"
    mixin = FastpathQwenVideoProcessorMixin

    def mirrors(self, obj: Any) -> bool:
        return any(cls.__name__ in _VIDEO_CLASSES for cls in type(obj).__mro__)

    def judge(self, original: Any) -> tuple[Any, str]:
        return judge(original)

    def twin_class(self, original: Any) -> type:
        from vlm_fastpath.qwen_integration.video_processor import fast_class_for

        return twin_class(fast_class_for(original))


KIND = VideoTwins()


def is_twin(obj: Any) -> bool:
    return isinstance(obj, FastpathQwenVideoProcessorMixin)


def twin_of(video_processor: Any, patch: str) -> tuple[Any | None, str]:
    """``(twin, "")`` for a video processor ours reproduces exactly, else ``(None, reason)``."""
    return KIND.twin_of(video_processor, patch)


def processor_view(hf_processor: Any, patch: str) -> Any:
    """``hf_processor`` itself, or a shallow copy of it whose ``video_processor`` is the twin
    (made once per original; the engine's object is never modified)."""
    return KIND.processor_view(hf_processor, patch)


def forget_views() -> None:
    """Drop every cached view and decision (tests; the next request checks afresh)."""
    KIND.forget()
