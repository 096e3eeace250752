"""Fast twins of transformers' Qwen2-VL image processors, for the vLLM and SGLang patches.

A twin (:mod:`.twins`) of the engine's own ``Qwen2VLImageProcessor`` (or ``...Pil``/``...Fast``)
is an instance of a subclass of the original's class sharing the original's ``__dict__``, so
``isinstance``, every setting (``size``, ``merge_size``, ``patch_size``...) and every method the
engines read stay the original's. Only ``preprocess`` (``__call__`` goes through it) is ours:
``FastQwen2VLImageProcessor`` in the mode of the original (torchvision or PIL arithmetic) for the
settings as they are at call time, proven equal by ``check_compatible`` per class and settings.

A call goes to the original, unchanged, when the patch that made the twin is no longer applied,
when it asks for a device other than the CPU (SGLang's GPU preprocessing), when it passes a
keyword our processor does not reproduce, or when the settings (changed after hand-out) fail the
probes; a setting or input ours rejects is answered by the original too (its own result or its
own error), and an unexpected fault in ours is contained (:mod:`..core.containment`).

Engine-neutral: imported lazily by the vLLM and SGLang patches' ``apply``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...qwen_integration.hf_config import SUPPORTED_CLASSES
from ..core.containment import call_contained
from .speculative_offer import SpeculativeOffer
from .switches import active
from .twins import TwinKind, TwinMixin, logger  # noqa: F401 - the adapters' logger

# Methods whose replacement (e.g. SGLang's AMX ``_preprocess`` on some CPUs) changes the bytes.
_PIXEL_METHODS = ("preprocess", "_preprocess", "resize", "patchify", "_further_process_kwargs")
# Per-call keywords ours honours (settings) or that change nothing in the output (plumbing).
_HONOURED = frozenset(
    {"size", "min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size",
     "image_mean", "image_std", "rescale_factor", "do_resize", "do_rescale", "do_normalize",
     "do_convert_rgb", "resample", "return_tensors", "input_data_format", "data_format",
     "default_to_square", "disable_grouping", "image_seq_length", "device"}
)


def _foreign_method(hf_processor: Any) -> str | None:
    """Name of a pixel method that is not transformers' own (someone patched it)."""
    for name in _PIXEL_METHODS:
        if callable(hf_processor.__dict__.get(name)):
            return f"{type(hf_processor).__name__}.{name} is replaced on the object"
        func = getattr(type(hf_processor), name, None)
        module = getattr(func, "__module__", None) or ""
        if func is not None and not module.startswith("transformers."):
            return f"{type(hf_processor).__name__}.{name} is {module}.{func.__qualname__}"
    return None


class FastpathQwenImageProcessorMixin(TwinMixin):
    """``preprocess`` of a twin: ours where exact, the original's otherwise."""

    __slots__ = ()

    def preprocess(self, images: Any = None, *args: Any, **kwargs: Any) -> Any:
        engine = functools.partial(self._vlm_original.preprocess, images, *args, **kwargs)
        if args or images is None or not self.vlm_serves(kwargs):
            return engine()
        if any(value is not None for key, value in kwargs.items() if key not in _HONOURED):
            return engine()
        fast = self.vlm_fast()
        if fast is None:
            return engine()  # these settings (changed after hand-out) are not reproduced

        from vlm_fastpath.qwen_integration import QwenProcessorError

        try:
            return call_contained(
                self._vlm_patch,
                functools.partial(fast.preprocess, images, **kwargs),
                engine,
                where="FastpathQwenImageProcessor.preprocess",
            )
        except QwenProcessorError:
            # A setting or an input ours does not take: the engine's own answer (or error).
            return engine()

    def __call__(self, images: Any = None, *args: Any, **kwargs: Any) -> Any:
        return self.preprocess(images, *args, **kwargs)


@functools.cache
def twin_class(hf_class: type) -> type:
    """The twin class of one transformers image processor class (cached: one per class)."""
    return type(
        f"Fastpath{hf_class.__name__}",
        (FastpathQwenImageProcessorMixin, hf_class),
        {"__module__": __name__, "__slots__": (), "_vlm_kind": KIND,
         "__doc__": f"{hf_class.__name__} with vlm-fastpath's pixels."},
    )


def _check_hook() -> Callable[..., str | None] | None:
    """``check_compatible`` as the model side exports it now (tests monkeypatch it there)."""
    import vlm_fastpath.qwen_integration as qwen

    return getattr(qwen, "check_compatible", None)


def judge(hf_processor: Any) -> tuple[Any, str]:
    """``(FastQwen2VLImageProcessor, "")`` where ours reproduces ``hf_processor`` exactly as it
    is now (the probes run), else ``(None, reason)``."""
    name = type(hf_processor).__name__
    if name not in SUPPORTED_CLASSES:
        return None, f"image processor {name} is not one vlm-fastpath mirrors"
    foreign = _foreign_method(hf_processor)
    if foreign:
        return None, f"{foreign}, not transformers' own"
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    try:
        fast = FastQwen2VLImageProcessor.from_hf(hf_processor)
    except Exception as exc:  # noqa: BLE001 - any setting ours cannot take means stand aside
        return None, f"settings not reproduced: {type(exc).__name__}: {exc}"
    reason = (_check_hook() or (lambda *_: None))(hf_processor, fast)
    return (None, reason) if reason else (fast, "")


class ImageTwins(TwinKind):
    """Twins of ``Qwen2VLImageProcessor``/``...Pil``/``...Fast`` objects."""

    label = "image"
    attr = "image_processor"
    mixin = FastpathQwenImageProcessorMixin

    def mirrors(self, obj: Any) -> bool:
        return type(obj).__name__ in SUPPORTED_CLASSES

    def judge(self, original: Any) -> tuple[Any, str]:
        return judge(original)

    def twin_class(self, original: Any) -> type:
        return twin_class(type(original))

    def make_offer(self, fast: Any, patch: str) -> SpeculativeOffer | None:
        return SpeculativeOffer(fast, patch, active)


KIND = ImageTwins()


def why_not_mirrored(hf_processor: Any) -> str:
    """Empty when ours reproduces ``hf_processor`` exactly, else the reason (runs the probes)."""
    return KIND.verdict(hf_processor)[1]


def is_twin(obj: Any) -> bool:
    return isinstance(obj, FastpathQwenImageProcessorMixin)


def twin_of(hf_processor: Any, patch: str) -> tuple[Any | None, str]:
    """``(twin, "")`` for a processor ours reproduces exactly, else ``(None, reason)``."""
    return KIND.twin_of(hf_processor, patch)


def processor_view(hf_processor: Any, patch: str) -> Any:
    """``hf_processor`` itself, or a shallow copy of it whose ``image_processor`` is the twin
    (made once per original; the engine's object is never modified)."""
    return KIND.processor_view(hf_processor, patch)


def forget_views() -> None:
    """Drop every cached view and decision (tests; the next request checks afresh)."""
    KIND.forget()
