"""``FastpathKimiVisionProcessor``: our Kimi processor in the shape vLLM expects.

vLLM loads Kimi K2.5/K2.6 image processors through transformers' ``from_pretrained`` and keeps
them next to ``BaseImageProcessor`` objects (``to_dict``/``to_json_string``, ``from_dict``), so
the adapter subclasses transformers' ``BaseImageProcessor`` and delegates every pixel and size
computation to ``FusedKimiProcessor`` (bit-exact with the checkpoint's arithmetic).

Imported lazily by the vLLM patches' ``apply`` only: this module imports transformers and torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature

from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiConfigError

from ..core.containment import LEDGER, call_contained
from .speculative_offer import SpeculativeOffer
from .switches import active

# Keys of a preprocessor_config.json that describe how it was loaded, not the processor.
_LOADER_KEYS = frozenset(
    {"media_proc_cfg", "media_processor", "auto_map", "image_processor_type", "processor_class"}
)


class FastpathKimiVisionProcessor(BaseImageProcessor):
    """Kimi K2.5/K2.6 vision-chunk processor (vlm-fastpath), API-compatible with vLLM's."""

    model_type = "kimi_k25"
    model_input_names = ["pixel_values", "grid_thws"]
    # Run-time containment: the patch that hands this processor out, and the engine class
    # whose processor answers a call whose fast path faulted. The fused-class patch sets them
    # class-wide while applied; each instance copies them when built, so a processor the
    # engine holds keeps its engine after the patch is reverted (quarantine resets these).
    patch_name: ClassVar[str] = "vllm-kimi-fused-processor"
    engine_class: ClassVar[Callable[[dict[str, Any]], Any] | None] = None

    def __init__(self, media_proc_cfg: Mapping[str, Any], **kwargs: Any) -> None:
        for key in _LOADER_KEYS:
            kwargs.pop(key, None)
        super().__init__(**kwargs)
        self._fused = FusedKimiProcessor(media_proc_cfg)
        self.media_proc_cfg = dict(self._fused.media_proc_cfg)
        self.num_frames_per_chunk = self._fused.num_frames_per_chunk
        self._vlm_patch = type(self).patch_name
        self._vlm_engine_class = type(self).engine_class
        # the engine's loader may start ours on a large image while it decodes
        self._vlm_offer = SpeculativeOffer(self._fused, self._vlm_patch, active)
        self._vlm_offer.offer()
        self._vlm_engine_fallback: Callable[[], Any] | None = None

    def bind_engine(self, patch: str, fallback: Callable[[], Any]) -> None:
        """Per instance (the checkpoint loader's patch): ``fallback()`` builds the engine's
        processor, which answers faulted calls and every call once ``patch`` is faulted."""
        self.__dict__["_vlm_patch"] = patch
        self.__dict__["_vlm_engine_fallback"] = fallback
        offer = self.__dict__.get("_vlm_offer")
        if offer is not None:
            offer.patch = patch  # the offer serves while this patch does

    @property
    def serving_patch(self) -> str:
        """The patch whose containment this processor's calls count against."""
        return self.__dict__.get("_vlm_patch", type(self).patch_name)

    def _has_engine(self) -> bool:
        return (
            self.__dict__.get("_vlm_engine_fallback") is not None
            or self.__dict__.get("_vlm_engine_class", type(self).engine_class) is not None
        )

    def _faulted_engine(self) -> Any:
        """The engine's processor once our patch is reverted or quarantined, or where this
        processor's configuration failed the behaviour probe; else None (ours answers)."""
        if not self._has_engine():
            return None
        if self._switched_off() or self._probe_clause():
            return self._engine_processor()
        return None

    def _switched_off(self) -> bool:
        """Our patch no longer serves: reverted (the kill switch reaches a processor vLLM
        cached before the revert) or quarantined for faults."""
        patch = self.serving_patch
        return LEDGER.is_disabled(patch) or not active(patch)

    def _probe_clause(self) -> str | None:
        """The behaviour clause for this instance's configuration (vLLM's fused class only).

        The patch probed the checkpoint's published configuration when it applied; a
        checkpoint with another ``media_proc_cfg`` is probed once, before its first call.
        """
        if "_vlm_probe" not in self.__dict__:
            clause = None
            engine_class = self.__dict__.get("_vlm_engine_class")
            if engine_class is not None and self.__dict__.get("_vlm_engine_fallback") is None:
                from . import kimi_probe as probe

                clause = probe.verdict(engine_class, probe.OursForProbe, self.media_proc_cfg)
                if clause:
                    from ..core.registry import REGISTRY

                    REGISTRY.note_stand_aside(
                        self.serving_patch, f"media_proc_cfg {self.media_proc_cfg}", clause
                    )
            self.__dict__["_vlm_probe"] = clause
        return self.__dict__["_vlm_probe"]

    @property
    def fused(self) -> FusedKimiProcessor:
        return self._fused

    # -- sizes ---------------------------------------------------------------------------
    def _sizes_of(self, name: str) -> Callable[..., Any]:
        """``name`` of the engine's processor once faulted (where it has one), else ours."""
        engine = self._faulted_engine()
        method = getattr(engine, name, None) if engine is not None else None
        return method if callable(method) else getattr(self._fused, name)

    def media_tokens_calculator(self, media: Mapping[str, Any]) -> int:
        return self._sizes_of("media_tokens_calculator")(media)

    def get_resize_config(self, media_input: Mapping[str, Any]) -> dict[str, int]:
        return self._sizes_of("get_resize_config")(media_input)

    @staticmethod
    def resize_image(image: Any, new_width: int, new_height: int) -> np.ndarray:
        from PIL import Image

        resized = image.resize((new_width, new_height), resample=Image.Resampling.BICUBIC)
        return np.asarray(resized)

    # -- pixels --------------------------------------------------------------------------
    def preprocess(  # type: ignore[override]
        self,
        medias: Any,
        return_tensors: Any = None,
        do_rescale: bool = True,
        do_normalize: bool = True,
        **kwargs: Any,
    ) -> BatchFeature:
        if isinstance(medias, (list, tuple)) and not medias:
            return BatchFeature(data={}, tensor_type=return_tensors)
        probed_apart = self._has_engine() and (self._switched_off() or self._probe_clause())
        offer = self.__dict__.get("_vlm_offer")
        if offer is not None and not probed_apart:
            offer.patch = self.serving_patch  # ``bind_engine`` may have named another
            offer.offer()  # the latest processor called is the one to guess

        def fast() -> BatchFeature:
            out = self._fused.preprocess(
                medias, return_tensors="pt", do_rescale=do_rescale, do_normalize=do_normalize
            )
            return BatchFeature(data=dict(out), tensor_type=return_tensors)

        def engine() -> Any:  # the processor vLLM would have used, same arguments
            processor = self._engine_processor()
            flags = {} if do_rescale and do_normalize else {
                "do_rescale": do_rescale, "do_normalize": do_normalize
            }
            if flags and not _takes_normalize_flags(processor.preprocess):
                # Before 0.32 vLLM's processors always normalize: float32 pixels, which the
                # device-normalize patch's model side passes through unchanged.
                flags = {}
            return processor.preprocess(medias, return_tensors=return_tensors, **flags)

        if probed_apart:
            return engine()  # reverted, or this configuration behaves otherwise in ours
        # Pure on its inputs: the engine's processor may answer a call that faulted here, and
        # answers every call once the patch is quarantined.
        return call_contained(
            self.serving_patch, fast, engine if self._has_engine() else None,
            where="FastpathKimiVisionProcessor.preprocess",
        )

    def _engine_processor(self) -> Any:
        engine = self.__dict__.get("_engine")
        if engine is None:
            fallback = self.__dict__.get("_vlm_engine_fallback")
            if fallback is not None:
                engine = fallback()
            else:
                engine_class = self.__dict__.get("_vlm_engine_class", type(self).engine_class)
                assert engine_class is not None
                engine = engine_class(dict(self.media_proc_cfg))
            self.__dict__["_engine"] = engine
        return engine

    def __call__(self, medias: Any, *args: Any, **kwargs: Any) -> BatchFeature:
        return self.preprocess(medias, *args, **kwargs)

    # -- (de)serialization ---------------------------------------------------------------
    def __repr__(self) -> str:
        return f"FastpathKimiVisionProcessor(media_proc_cfg={self.media_proc_cfg})"

    def to_dict(self) -> dict[str, Any]:
        output = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        output = json.loads(json.dumps(output, default=_jsonable))
        output["media_proc_cfg"] = dict(self.media_proc_cfg)
        output.pop("num_frames_per_chunk", None)
        output["image_processor_type"] = type(self).__name__
        return output

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any], **kwargs: Any):  # type: ignore[override]
        config = dict(config_dict)
        media_proc_cfg = config.pop("media_proc_cfg", None)
        if media_proc_cfg is None:
            raise KimiConfigError(
                "preprocessor_config.json has no 'media_proc_cfg': not a Kimi K2.5/K2.6 checkpoint"
            )
        processor = cls(media_proc_cfg, **config)
        if kwargs.get("return_unused_kwargs"):
            return processor, {}
        return processor


def _takes_normalize_flags(preprocess: Any) -> bool:
    """True when a processor's ``preprocess`` accepts ``do_normalize`` (vLLM 0.32+)."""
    import inspect

    try:
        params = inspect.signature(preprocess).parameters
    except (TypeError, ValueError):
        return False
    return "do_normalize" in params


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)
