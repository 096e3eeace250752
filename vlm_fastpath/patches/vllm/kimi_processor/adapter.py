"""``FastpathKimiVisionProcessor``: our Kimi processor in the shape vLLM expects.

vLLM loads Kimi K2.5/K2.6 image processors through transformers' ``from_pretrained`` and keeps
them next to ``BaseImageProcessor`` objects (``to_dict``/``to_json_string``, ``from_dict``), so
the adapter subclasses transformers' ``BaseImageProcessor`` and delegates every pixel and size
computation to ``FusedKimiProcessor`` (bit-exact with the checkpoint's arithmetic).

Imported lazily by the vLLM patches' ``apply`` only: this module imports transformers and torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature

from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiConfigError

# Keys of a preprocessor_config.json that describe how it was loaded, not the processor.
_LOADER_KEYS = frozenset(
    {"media_proc_cfg", "media_processor", "auto_map", "image_processor_type", "processor_class"}
)


class FastpathKimiVisionProcessor(BaseImageProcessor):
    """Kimi K2.5/K2.6 vision-chunk processor (vlm-fastpath), API-compatible with vLLM's."""

    model_type = "kimi_k25"
    model_input_names = ["pixel_values", "grid_thws"]

    def __init__(self, media_proc_cfg: Mapping[str, Any], **kwargs: Any) -> None:
        for key in _LOADER_KEYS:
            kwargs.pop(key, None)
        super().__init__(**kwargs)
        self._fused = FusedKimiProcessor(media_proc_cfg)
        self.media_proc_cfg = dict(self._fused.media_proc_cfg)
        self.num_frames_per_chunk = self._fused.num_frames_per_chunk

    @property
    def fused(self) -> FusedKimiProcessor:
        return self._fused

    # -- sizes ---------------------------------------------------------------------------
    def media_tokens_calculator(self, media: Mapping[str, Any]) -> int:
        return self._fused.media_tokens_calculator(media)

    def get_resize_config(self, media_input: Mapping[str, Any]) -> dict[str, int]:
        return self._fused.get_resize_config(media_input)

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
        out = self._fused.preprocess(
            medias, return_tensors="pt", do_rescale=do_rescale, do_normalize=do_normalize
        )
        return BatchFeature(data=dict(out), tensor_type=return_tensors)

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


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)
