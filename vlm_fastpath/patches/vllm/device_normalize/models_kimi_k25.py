"""vLLM ``vllm.model_executor.models.kimi_k25``: ship Kimi pixels as uint8, normalize on the device.

Why: up to vLLM 0.31 the Kimi K2.5/K2.6 processor normalizes in the API server and the
normalized tensor crosses the API-server -> EngineCore boundary (float32 from the processor,
cast to the model dtype by ``InputProcessingContext._postprocess_output``): 4 images of
1536x1024 are 73.0 MiB of float32 (36.5 MiB once cast to bf16). The uint8 patches they come from
are 18.3 MiB, and a 256-entry per-channel table turns them into the exact float32 on the device.
vLLM 0.32 (PR vllm-project/vllm#50411, ``mm_device_do_normalize``) does the same for Kimi.

How (two halves, applied and reverted together):

- API server side: ``KimiK25ProcessingInfo.get_hf_processor`` is wrapped. When the image
  processor inside the returned ``KimiK25Processor`` is our ``FastpathKimiVisionProcessor``
  (the ``vllm-kimi-processor`` / ``vllm-kimi-fused-processor`` patches put it there), it returns
  a shallow copy whose image processor always preprocesses with
  ``do_rescale=False, do_normalize=False`` (uint8 ``pixel_values``, same layout). Every pixel
  path of vLLM goes through ``get_hf_processor`` (requests and the memory-profiling dummy
  inputs alike); ``info.image_processor`` itself keeps its float32 default. uint8 is not a
  floating dtype, so ``_postprocess_output`` leaves it alone; the field config
  (``flat_from_sizes``), batching and msgpack transport keep the dtype.
- Model side: ``KimiK25ForConditionalGeneration.__init__`` is wrapped to attach a normalizer
  built from the checkpoint's ``normalize_lut`` (3x256 float32, from the checkpoint's exact float
  ops) and the model dtype; ``_parse_and_validate_media_input`` (where 0.24 casts
  ``pixel_values`` to the vision tower's dtype) is wrapped to turn uint8 ``pixel_values`` into
  float32 on their own device first (one ``index_select`` into the table, bit-identical to the
  eager float32), cast them to ``model_config.dtype`` as the API server would have, and hand
  them to the original method, which casts to the tower dtype as the release does. Float input
  passes through untouched. uint8 input without a normalizer raises instead of reaching the
  tower unnormalized.

Stands aside (``not-needed``) unless the processor patch of this release
(``vllm-kimi-processor`` 0.19-0.24, ``vllm-kimi-fused-processor`` 0.25-0.31) is applied, so
uint8 is only produced where our model-side normalization is installed too. Opt out by name:
``VLM_FASTPATH_SKIP=vllm-kimi-device-normalize`` (both halves go together). The API server and
the processes that run the model must all have vlm-fastpath installed (they do on one node: one
interpreter, one environment); for multi-node workers install it on every node or opt out.

Upstream: vllm-project/vllm#50411 (Kimi in 0.32.0). Applies to vLLM >=0.19, open-ended (verified on
0.24.0); on 0.32+ (``supports_mm_device_do_normalize`` on the model class) it reports
``upstream``. Not 0.15-0.18: their ``MoonshotKimiVAutoProcessor`` holds the image processor as
``media_processor`` (no ``image_processor`` to swap, so the view would be inert), and no
processor patch of ours applies there.
"""

from __future__ import annotations

import copy
import functools
import sys
import threading
import weakref
from typing import Any

from ...._log import get_logger
from ...core.base import Patch, PatchContext
from ...core.registry import register

KIMI_K25 = "vllm.model_executor.models.kimi_k25"
INFO_CLASS = "KimiK25ProcessingInfo"
MODEL_CLASS = "KimiK25ForConditionalGeneration"
PARSE_METHOD = "_parse_and_validate_media_input"
NORMALIZER_ATTR = "_vlm_fastpath_device_normalizer"
# The patches that make vLLM hand out FastpathKimiVisionProcessor, per release range.
PROCESSOR_PATCHES = ("vllm-kimi-processor", "vllm-kimi-fused-processor")

logger = get_logger("vlm_fastpath.patches")


class _Transport:
    """Whether the patch is applied; ``apply`` turns it on through its context, so a revert
    (or a quarantine that takes the patch off) turns it off for every view handed out."""

    on = False


TRANSPORT = _Transport()


class Uint8TransportProcessor:
    """Our image processor, preprocessing to uint8 patches (normalization left to the model).

    Only while the patch is applied: a view the engine still holds afterwards forwards calls
    as vLLM made them, since the model side that normalizes uint8 is gone with the patch.
    """

    vlm_fastpath_uint8_transport = True

    def __init__(self, processor: Any) -> None:
        self._processor = processor

    @property
    def wrapped(self) -> Any:
        return self._processor

    def preprocess(self, medias: Any, return_tensors: Any = None, **kwargs: Any) -> Any:
        if TRANSPORT.on:
            kwargs["do_rescale"] = False
            kwargs["do_normalize"] = False
        return self._processor.preprocess(medias, return_tensors=return_tensors, **kwargs)

    __call__ = preprocess

    def __getattr__(self, name: str) -> Any:
        if name == "_processor":  # during copy/unpickle, before __init__
            raise AttributeError(name)
        return getattr(self._processor, name)

    def __repr__(self) -> str:
        return f"Uint8TransportProcessor({self._processor!r})"


def _is_ours(processor: Any) -> bool:
    from ...adapters.kimi_vision import FastpathKimiVisionProcessor

    return isinstance(processor, FastpathKimiVisionProcessor)


def make_get_hf_processor(original: Any) -> Any:
    """``KimiK25ProcessingInfo.get_hf_processor`` returning a uint8-transport processor."""
    views: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    @functools.wraps(original)
    def get_hf_processor(self: Any, *args: Any, **kwargs: Any) -> Any:
        processor = original(self, *args, **kwargs)
        image_processor = getattr(processor, "image_processor", None)
        if not _is_ours(image_processor):
            return processor  # vLLM's own processor: float32, normalized as the release does
        with lock:
            try:
                view = views.get(processor)
            except TypeError:  # unhashable: no cache
                view = None
            if view is None or view.image_processor.wrapped is not image_processor:
                view = copy.copy(processor)
                view.image_processor = Uint8TransportProcessor(image_processor)
                try:
                    views[processor] = view
                except TypeError:
                    pass
        return view

    get_hf_processor.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return get_hf_processor


class DeviceNormalizer:
    """uint8 ``[..., 3, p, p]`` -> float32 through the checkpoint's table, on the input's device,
    then cast to the dtype the API server would have shipped (``model_config.dtype``)."""

    def __init__(self, lut: Any, transport_dtype: Any) -> None:
        import numpy as np
        import torch

        table = np.ascontiguousarray(np.asarray(lut, dtype=np.float32))
        if table.shape != (3, 256):
            raise ValueError(f"normalize table must be (3, 256), got {table.shape}")
        self._table = torch.from_numpy(table.reshape(-1).copy())
        # From numpy, not torch factories: vLLM builds models under a default-device context.
        self._offsets = torch.from_numpy(np.arange(0, 768, 256, dtype=np.int32).reshape(3, 1, 1))
        self.transport_dtype = transport_dtype
        self._per_device: dict[Any, tuple[Any, Any]] = {}

    def _on(self, device: Any) -> tuple[Any, Any]:
        cached = self._per_device.get(device)
        if cached is None:
            cached = (self._table.to(device), self._offsets.to(device))
            self._per_device[device] = cached
        return cached

    def to_float32(self, pixels: Any) -> Any:
        """Exact float32 ``pixel_values`` from uint8 ones (same shape and device)."""
        import torch

        if pixels.dtype != torch.uint8:
            raise TypeError(f"expected uint8 pixel_values, got {pixels.dtype}")
        if pixels.ndim < 3 or pixels.shape[-3] != 3:
            raise ValueError(
                f"expected uint8 pixel_values [..., 3, p, p], got {tuple(pixels.shape)}"
            )
        table, offsets = self._on(pixels.device)
        index = pixels.to(torch.int32) + offsets  # channel c reads table[c * 256 + value]
        return table.index_select(0, index.reshape(-1)).view(pixels.shape)

    def normalize(self, pixels: Any) -> Any:
        """uint8 tensors (or lists of them) -> what the release would have received."""
        import torch

        if isinstance(pixels, (list, tuple)):
            return type(pixels)(self.normalize(item) for item in pixels)
        if isinstance(pixels, torch.Tensor) and pixels.dtype == torch.uint8:
            return self.to_float32(pixels).to(self.transport_dtype)
        return pixels


def _has_uint8(pixels: Any) -> bool:
    if isinstance(pixels, (list, tuple)):
        return any(_has_uint8(item) for item in pixels)
    return str(getattr(pixels, "dtype", "")) == "torch.uint8"


def build_normalizer(vllm_config: Any) -> DeviceNormalizer | None:
    """The normalizer for the checkpoint in ``vllm_config``, or None if its processor isn't ours.

    Loads the image processor through ``kimi_k25``'s own loader (as ``KimiK25ProcessingInfo``
    does, so it is the same cached object and the same table as the API server's).
    """
    module = sys.modules[KIMI_K25]
    model_config = vllm_config.model_config
    kwargs: dict[str, Any] = {
        "revision": getattr(model_config, "revision", None),
        "trust_remote_code": getattr(model_config, "trust_remote_code", False),
    }
    fused_cls = module.__dict__.get("KimiK25FusedVisionProcessor")
    if fused_cls is not None:  # 0.25+: the class KimiK25ProcessingInfo asks for
        kwargs["processor_cls_overrides"] = fused_cls
    processor = module.cached_get_image_processor(model_config.model, **kwargs)
    if not _is_ours(processor):
        return None
    return DeviceNormalizer(processor.fused.normalize_lut, model_config.dtype)


def attach_normalizer(model: Any, vllm_config: Any) -> DeviceNormalizer | None:
    """Give ``model`` the normalizer its ``_parse_and_validate_media_input`` will use."""
    try:
        normalizer = build_normalizer(vllm_config)
    except Exception as exc:  # noqa: BLE001 - the model must still build; uint8 then raises
        logger.warning(
            "vlm_fastpath: no device-side normalization table for Kimi (%s: %s)",
            type(exc).__name__,
            exc,
        )
        normalizer = None
    object.__setattr__(model, NORMALIZER_ATTR, normalizer)  # a plain attribute, no buffer
    return normalizer


def make_init(original: Any) -> Any:
    @functools.wraps(original)  # keeps the (vllm_config, prefix) signature vLLM inspects
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        attach_normalizer(self, vllm_config)

    __init__.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return __init__


def make_parse(original: Any) -> Any:
    @functools.wraps(original)
    def _parse_and_validate_media_input(self: Any, **kwargs: Any) -> Any:
        pixels = kwargs.get("pixel_values")
        if pixels is not None and _has_uint8(pixels):
            normalizer = self.__dict__.get(NORMALIZER_ATTR)
            if normalizer is None:
                raise RuntimeError(
                    "vlm_fastpath: Kimi received uint8 pixel_values but has no normalization "
                    "table (model built before the vllm-kimi-device-normalize patch, or its "
                    "checkpoint processor is not ours); refusing to feed raw bytes to the tower"
                )
            kwargs["pixel_values"] = normalizer.normalize(pixels)
        return original(self, **kwargs)

    _parse_and_validate_media_input.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return _parse_and_validate_media_input


@register
class KimiDeviceNormalizePatch(Patch):
    name = "vllm-kimi-device-normalize"
    engine = "vllm"
    versions = ">=0.19"  # 0.15-0.18: no .image_processor on their hf processor
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "vllm-project/vllm#50411"
    summary = "Kimi pixel_values cross to EngineCore as uint8; the model normalizes on its device"
    # uint8 pixels only leave a processor of ours, and only where the model side is installed.
    requires_any = PROCESSOR_PATCHES
    after = PROCESSOR_PATCHES

    def upstream_equivalent(self) -> str | None:
        model_cls = getattr(sys.modules[KIMI_K25], MODEL_CLASS, None)
        if model_cls is not None and getattr(model_cls, "supports_mm_device_do_normalize", False):
            return "vLLM normalizes Kimi pixels on the device (mm_device_do_normalize, #50411)"
        return None

    def not_needed(self) -> str | None:
        module = sys.modules[KIMI_K25]
        for cls_name in (INFO_CLASS, MODEL_CLASS):
            if not hasattr(module, cls_name):
                return f"{KIMI_K25} has no {cls_name}"
        return None

    def apply(self, ctx: PatchContext) -> None:
        module = sys.modules[KIMI_K25]
        info_cls = getattr(module, INFO_CLASS)
        model_cls = getattr(module, MODEL_CLASS)
        targets = {
            (info_cls, "get_hf_processor"): make_get_hf_processor,
            (model_cls, "__init__"): make_init,
            (model_cls, PARSE_METHOD): make_parse,
        }
        originals = {}
        for owner, attr in targets:
            original = owner.__dict__.get(attr)
            if not callable(original):
                raise LookupError(f"{owner.__name__}.{attr} not found (renamed?)")
            originals[(owner, attr)] = original
        for (owner, attr), make in targets.items():
            ctx.set_attr(owner, attr, make(originals[(owner, attr)]))
        ctx.set_attr(TRANSPORT, "on", True)
