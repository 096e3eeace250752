"""Fast twins of transformers' Qwen-VL video processors, and the processor views that carry them.

A twin is an instance of a subclass of our ``FastQwen2VLVideoProcessor`` or
``FastQwen3VLVideoProcessor`` (themselves subclasses of transformers' classes: ``isinstance``,
every attribute and every method the engines read stay transformers'), holding the original's
instance attributes. Its ``preprocess`` is ours while the patch that made it is applied, the
original's after a revert; an unexpected fault in ours is contained (the original answers the
call, :mod:`vlm_fastpath.patches.core.containment`); bad input raises our ``ValueError``.

Engine-neutral (no engine import): the vLLM patch uses it, an SGLang one could.
"""

from __future__ import annotations

import copy
import functools
import threading
import weakref
from typing import Any

from ..._log import get_logger
from ..core.containment import call_contained

logger = get_logger("vlm_fastpath.patches")

_LOCK = threading.Lock()
_MISSING = object()


class Switches:
    """Whether each patch that hands out video twins is applied (read at call time)."""

    def __getattr__(self, name: str) -> bool:
        return False


SWITCHES = Switches()


def _active(patch: str) -> bool:
    return bool(SWITCHES.__dict__.get(patch, False))


class FastpathQwenVideoProcessorMixin:
    """``preprocess`` of a twin: ours while its patch is applied, else the original's."""

    def preprocess(self, videos: Any = None, *args: Any, **kwargs: Any) -> Any:
        original = self.__dict__["_vlm_original"]
        patch = self.__dict__["_vlm_patch"]

        def engine() -> Any:
            return original.preprocess(videos, *args, **kwargs)

        if args or videos is None or not _active(patch):
            return engine()
        device = kwargs.get("device")
        if device is not None and str(device) != "cpu":
            return engine()  # GPU preprocessing stays the engine's
        fast = functools.partial(super().preprocess, videos, **kwargs)  # type: ignore[misc]
        return call_contained(patch, fast, engine, where="FastpathQwenVideoProcessor.preprocess")

    def __call__(self, videos: Any = None, *args: Any, **kwargs: Any) -> Any:
        return self.preprocess(videos, *args, **kwargs)

    # The twin serializes, copies and prints as the engine's processor.
    def to_dict(self) -> dict[str, Any]:
        return self.__dict__["_vlm_original"].to_dict()

    def to_json_string(self) -> str:
        return self.__dict__["_vlm_original"].to_json_string()

    def __repr__(self) -> str:
        return f"FastpathQwenVideo({self.__dict__['_vlm_original']!r})"

    def __reduce__(self) -> Any:
        return (copy.copy, (self.__dict__["_vlm_original"],))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.__dict__["_vlm_original"], memo)


@functools.cache
def twin_class(fast_class: type) -> type:
    """The twin class of one of our fast video processor classes (one per class)."""
    return type(
        f"Fastpath{fast_class.__mro__[2].__name__}",
        (FastpathQwenVideoProcessorMixin, fast_class),
        {"__module__": __name__,
         "__doc__": f"{fast_class.__mro__[2].__name__} with vlm-fastpath's pixels."},
    )


def is_twin(obj: Any) -> bool:
    return isinstance(obj, FastpathQwenVideoProcessorMixin)


# id(original video processor) -> (twin or None, reason); entries die with the original.
_TWINS: dict[int, tuple[Any, str]] = {}
# id(original HF processor) -> its view with the video twin (None: keep the original).
_VIEWS: dict[int, Any] = {}


def why_not_mirrored(video_processor: Any) -> tuple[Any | None, str]:
    """``(fast, "")`` where ours reproduces ``video_processor`` (probes run), else
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


def twin_of(video_processor: Any, patch: str) -> tuple[Any | None, str]:
    """``(twin, "")`` for a video processor ours reproduces exactly, else ``(None, reason)``;
    the probes run once per original object (engines cache their processors)."""
    if is_twin(video_processor):
        return video_processor, ""
    key = id(video_processor)
    with _LOCK:
        known = _TWINS.get(key)
    if known is not None:
        return known
    fast, reason = why_not_mirrored(video_processor)
    twin = None
    if fast is not None:
        twin = object.__new__(twin_class(type(fast)))
        twin.__dict__.update(fast.__dict__)
        twin.__dict__["_vlm_original"] = video_processor
        twin.__dict__["_vlm_patch"] = patch
    else:
        logger.info("vlm_fastpath: %s keeps the engine's %s: %s", patch,
                    type(video_processor).__name__, reason)
        _note_stand_aside(patch, type(video_processor).__name__, reason)
    result = (twin, reason)
    with _LOCK:
        _TWINS[key] = result
    try:
        weakref.finalize(video_processor, _TWINS.pop, key, None)
    except TypeError:
        pass
    return result


def processor_view(hf_processor: Any, patch: str) -> Any:
    """``hf_processor`` itself, or a shallow copy of it whose ``video_processor`` is the twin
    (made once per original; the engine's object is never modified)."""
    if hf_processor is None or is_twin(getattr(hf_processor, "video_processor", None)):
        return hf_processor
    key = id(hf_processor)
    with _LOCK:
        view = _VIEWS.get(key, _MISSING)
    if view is _MISSING:
        video_processor = getattr(hf_processor, "video_processor", None)
        twin = None
        if video_processor is not None:
            twin, _ = twin_of(video_processor, patch)
        view = None
        if twin is not None:
            view = copy.copy(hf_processor)
            view.__dict__["video_processor"] = twin
        with _LOCK:
            _VIEWS[key] = view
        try:
            weakref.finalize(hf_processor, _VIEWS.pop, key, None)
        except TypeError:
            pass
    return hf_processor if view is None else view


def forget_views() -> None:
    """Drop every cached view and decision (tests; the next request checks afresh)."""
    with _LOCK:
        _VIEWS.clear()
        _TWINS.clear()


def _note_stand_aside(patch: str, what: str, reason: str) -> None:
    try:
        from ..core.registry import REGISTRY

        REGISTRY.note_stand_aside(patch, what, reason)
    except Exception:  # noqa: BLE001 - reporting must never fail a request
        pass
