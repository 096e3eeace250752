"""Fast twins of transformers' Qwen2-VL image processors, for the vLLM and SGLang patches.

A twin is a copy of the engine's own ``Qwen2VLImageProcessor`` (or ``...Pil``/``...Fast``)
whose class is a subclass of the original's, so ``isinstance``, every attribute (``size``,
``merge_size``, ``patch_size``, ``valid_kwargs``, ``fetch_images``...) and every method the
engines read stay the original's. Only ``preprocess`` (``__call__`` goes through it) is ours:
``FastQwen2VLImageProcessor`` in the mode of the original (torchvision or PIL arithmetic),
proven equal by ``check_compatible`` before the twin is handed out.

A call goes to the original processor, unchanged, when the patch that made the twin is no
longer applied, when it asks for a device other than the CPU (SGLang's GPU preprocessing), or
when it passes a keyword our processor does not reproduce; a setting or input ours rejects is
answered by the original too (its own result or its own error), and an unexpected fault in
ours is contained (:mod:`vlm_fastpath.patches.core.containment`).

Engine-neutral: imported lazily by the vLLM and SGLang patches' ``apply``.
"""

from __future__ import annotations

import copy
import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..._log import get_logger
from ...qwen_integration.hf_config import SUPPORTED_CLASSES
from ..core.containment import call_contained
from .speculative_offer import SpeculativeOffer

logger = get_logger("vlm_fastpath.patches")

# Methods whose replacement (e.g. SGLang's AMX ``_preprocess`` on some CPUs) changes the bytes.
_PIXEL_METHODS = ("preprocess", "_preprocess", "resize", "patchify", "_further_process_kwargs")
# Per-call keywords ours honours (settings) or that change nothing in the output (plumbing).
_HONOURED = frozenset(
    {"size", "min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size",
     "image_mean", "image_std", "rescale_factor", "do_resize", "do_rescale", "do_normalize",
     "do_convert_rgb", "resample", "return_tensors", "input_data_format", "data_format",
     "default_to_square", "disable_grouping", "image_seq_length", "device"}
)
_LOCK = threading.Lock()
_MISSING = object()


class Switches:
    """Whether each patch that hands out twins is applied (a twin obeys it at call time).

    The patches flip their entry with ``ctx.set_attr(SWITCHES, name, True)``, so a revert turns
    every twin they handed out back into the engine's processor.
    """

    def __getattr__(self, name: str) -> bool:
        return False


SWITCHES = Switches()


def _active(patch: str) -> bool:
    return bool(SWITCHES.__dict__.get(patch, False))


def _foreign_method(hf_processor: Any) -> str | None:
    """Name of a pixel method that is not transformers' own (someone patched it)."""
    for name in _PIXEL_METHODS:
        func = getattr(type(hf_processor), name, None)
        module = getattr(func, "__module__", None) or ""
        if func is not None and not module.startswith("transformers."):
            return f"{type(hf_processor).__name__}.{name} is {module}.{func.__qualname__}"
    return None


class FastpathQwenImageProcessorMixin:
    """``preprocess`` of a twin: ours where exact, the original's otherwise."""

    _vlm_original: Any
    _vlm_fast: Any
    _vlm_patch: str

    def preprocess(self, images: Any = None, *args: Any, **kwargs: Any) -> Any:
        original = self.__dict__["_vlm_original"]

        def engine() -> Any:
            return original.preprocess(images, *args, **kwargs)

        if args or images is None or not _active(self._vlm_patch):
            return engine()
        device = kwargs.get("device")
        if device is not None and str(device) != "cpu":
            return engine()  # GPU preprocessing stays the engine's
        if any(value is not None for key, value in kwargs.items() if key not in _HONOURED):
            return engine()

        from vlm_fastpath.qwen_integration import QwenProcessorError

        fast = self._vlm_fast
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

    # The twin serializes, copies and prints as the engine's processor.
    def to_dict(self) -> dict[str, Any]:
        return self.__dict__["_vlm_original"].to_dict()

    def to_json_string(self) -> str:
        return self.__dict__["_vlm_original"].to_json_string()

    def __repr__(self) -> str:
        return f"FastpathQwen({self.__dict__['_vlm_original']!r})"

    def __reduce__(self) -> Any:
        return (copy.copy, (self.__dict__["_vlm_original"],))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.__dict__["_vlm_original"], memo)


@functools.cache
def twin_class(hf_class: type) -> type:
    """The twin class of one transformers image processor class (cached: one per class)."""
    return type(
        f"Fastpath{hf_class.__name__}",
        (FastpathQwenImageProcessorMixin, hf_class),
        {"__module__": __name__, "__doc__": f"{hf_class.__name__} with vlm-fastpath's pixels."},
    )


def is_twin(obj: Any) -> bool:
    return isinstance(obj, FastpathQwenImageProcessorMixin)


# id(original image processor) -> (twin or None, reason); entries die with the original.
_TWINS: dict[int, tuple[Any, str]] = {}


def why_not_mirrored(hf_processor: Any, check: Callable[..., str | None] | None = None) -> str:
    """Empty when ours reproduces ``hf_processor`` exactly, else the reason (runs the probes)."""
    name = type(hf_processor).__name__
    if name not in SUPPORTED_CLASSES:
        return f"image processor {name} is not one vlm-fastpath mirrors"
    foreign = _foreign_method(hf_processor)
    if foreign:
        return f"{foreign}, not transformers' own"
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, check_compatible

    try:
        fast = FastQwen2VLImageProcessor.from_hf(hf_processor)
    except Exception as exc:  # noqa: BLE001 - any setting ours cannot take means stand aside
        return f"settings not reproduced: {type(exc).__name__}: {exc}"
    reason = (check or check_compatible)(hf_processor, fast)
    return reason or ""


def twin_of(hf_processor: Any, patch: str) -> tuple[Any | None, str]:
    """``(twin, "")`` for a processor ours reproduces exactly, else ``(None, reason)``.

    The probes run once per original processor object; engines cache their processors.
    """
    if is_twin(hf_processor):
        return hf_processor, ""
    key = id(hf_processor)
    with _LOCK:
        known = _TWINS.get(key)
    if known is not None:
        return known
    reason = why_not_mirrored(hf_processor, _check_hook())
    twin = None
    if not reason:
        from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

        twin = object.__new__(twin_class(type(hf_processor)))
        twin.__dict__.update(hf_processor.__dict__)
        twin.__dict__["_vlm_original"] = hf_processor
        twin.__dict__["_vlm_fast"] = FastQwen2VLImageProcessor.from_hf(hf_processor)
        twin.__dict__["_vlm_patch"] = patch
        twin.__dict__["_vlm_offer"] = SpeculativeOffer(twin.__dict__["_vlm_fast"], patch,
                                                       _active)
    else:
        logger.info(
            "vlm_fastpath: %s keeps the engine's %s: %s", patch, type(hf_processor).__name__, reason
        )
        note_stand_aside(patch, type(hf_processor).__name__, reason)
    result = (twin, reason)
    with _LOCK:
        _TWINS[key] = result
    try:
        weakref.finalize(hf_processor, _TWINS.pop, key, None)
    except TypeError:  # not weak-referenceable: keep the entry
        pass
    return result


def _check_hook() -> Callable[..., str | None] | None:
    """``check_compatible`` as the model side exports it now (tests monkeypatch it there)."""
    import vlm_fastpath.qwen_integration as qwen

    return getattr(qwen, "check_compatible", None)


# id(original HF processor) -> its view with the twin in place (None: keep the original).
_VIEWS: dict[int, Any] = {}


def processor_view(hf_processor: Any, patch: str) -> Any:
    """``hf_processor`` itself, or a shallow copy of it whose ``image_processor`` is the twin.

    The engine's object (often cached) is never modified; the copy shares the tokenizer and
    the video processor (videos stay the engine's), and is made once per original.
    """
    if hf_processor is None or is_twin(getattr(hf_processor, "image_processor", None)):
        return hf_processor
    key = id(hf_processor)
    with _LOCK:
        view = _VIEWS.get(key, _MISSING)
    if view is _MISSING:
        image_processor = getattr(hf_processor, "image_processor", None)
        twin = None
        if image_processor is not None:
            twin, _ = twin_of(image_processor, patch)
        view = None
        if twin is not None:
            view = copy.copy(hf_processor)
            view.__dict__["image_processor"] = twin
        with _LOCK:
            _VIEWS[key] = view
        try:
            weakref.finalize(hf_processor, _VIEWS.pop, key, None)
        except TypeError:
            pass
    if view is None:
        return hf_processor
    offer = view.image_processor.__dict__.get("_vlm_offer")
    if offer is not None and _active(patch):
        offer.offer()  # the engine's loader may start it on its next image
    return view


def forget_views() -> None:
    """Drop every cached view and decision (tests; the next request checks afresh)."""
    with _LOCK:
        _VIEWS.clear()
        _TWINS.clear()



def note_stand_aside(patch: str, what: str, reason: str) -> None:
    """Put a run-time stand-aside decision in the patch's status reason (doctor, status())."""
    try:
        from ..core.registry import REGISTRY

        REGISTRY.note_stand_aside(patch, what, reason)
    except Exception:  # noqa: BLE001 - reporting must never fail a request
        pass
