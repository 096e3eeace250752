"""Settings of a Qwen-VL image processor, read from a checkpoint or from a transformers one.

Nothing model-specific is hard-coded beyond transformers' own class defaults (which apply only
when a config leaves a key out): Qwen3-VL's patch 16 and its 0.5/0.5 statistics come from its
preprocessor_config.json like everything else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import QwenConfigError

# transformers' Qwen2VLImageProcessor class defaults (used only for keys a config omits).
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280
BICUBIC = 3

TORCHVISION = "torchvision"
PIL = "pil"
MODES = (TORCHVISION, PIL)

# image_processor_type values whose arithmetic is Pillow's (transformers 5.x names).
_PIL_TYPES = frozenset({"Qwen2VLImageProcessorPil"})


@dataclass(frozen=True)
class QwenImageConfig:
    """Everything that decides the output bytes of one preprocess call."""

    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    image_mean: tuple[float, float, float] = OPENAI_CLIP_MEAN
    image_std: tuple[float, float, float] = OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255
    do_resize: bool = True
    do_rescale: bool = True
    do_normalize: bool = True
    do_convert_rgb: bool = True
    resample: int = BICUBIC
    mode: str = TORCHVISION
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("patch_size", "temporal_patch_size", "merge_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise QwenConfigError(f"{name} must be a positive int, got {value!r}")
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise QwenConfigError(f"{name} must be a positive int, got {value!r}")
        if self.mode not in MODES:
            raise QwenConfigError(f"mode must be one of {MODES}, got {self.mode!r}")
        if int(self.resample) != BICUBIC:
            raise QwenConfigError(
                f"only BICUBIC resampling (3) is reproduced exactly, got resample={self.resample!r}"
            )
        object.__setattr__(self, "image_mean", _triple("image_mean", self.image_mean))
        object.__setattr__(self, "image_std", _triple("image_std", self.image_std))
        if self.do_normalize and any(s == 0 for s in self.image_std):
            raise QwenConfigError(f"image_std contains a zero: {self.image_std}")

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @property
    def size(self) -> dict[str, int]:
        """transformers' ``size`` dict (what vLLM reads and overrides with ``|``)."""
        return {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}

    def with_overrides(self, overrides: Mapping[str, Any]) -> QwenImageConfig:
        """This config with per-call kwargs applied the way transformers applies them:
        ``size`` first, then ``min_pixels``/``max_pixels`` on top of it."""
        changes = _normalise_keys(overrides, base=self)
        return replace(self, **changes) if changes else self

    @classmethod
    def from_dict(
        cls, config: Mapping[str, Any], *, mode: str | None = None
    ) -> QwenImageConfig:
        """From a preprocessor_config.json dict (either spelling of the pixel limits)."""
        if not isinstance(config, Mapping):
            raise QwenConfigError(f"config must be a mapping, got {type(config).__name__}")
        changes = _normalise_keys(config, base=cls())
        if mode is None:
            kind = str(config.get("image_processor_type", ""))
            mode = PIL if kind in _PIL_TYPES else TORCHVISION
        changes["mode"] = mode
        return cls(**changes)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], *, mode: str | None = None
    ) -> QwenImageConfig:
        """From a checkpoint folder or the path of its preprocessor_config.json."""
        file = os.fspath(path)
        if os.path.isdir(file):
            file = os.path.join(file, "preprocessor_config.json")
        try:
            with open(file, encoding="utf-8") as handle:
                data = json.load(handle)
        except UnicodeDecodeError as exc:  # a ValueError, not a JSONDecodeError
            raise QwenConfigError(f"{file} is not UTF-8 text (a JSON file is): {exc}") from exc
        except (OSError, json.JSONDecodeError) as exc:
            raise QwenConfigError(f"cannot read {file}: {exc}") from exc
        return cls.from_dict(data, mode=mode)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        data["size"] = self.size
        return data


def _triple(name: str, value: Any) -> tuple[float, float, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value, value, value)
    if not isinstance(value, Sequence) or len(value) != 3:
        raise QwenConfigError(f"{name} must be 3 numbers (one per RGB channel), got {value!r}")
    try:
        return (float(value[0]), float(value[1]), float(value[2]))
    except (TypeError, ValueError) as exc:
        raise QwenConfigError(f"{name} must be 3 numbers, got {value!r}") from exc


_PLAIN_KEYS = (
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "image_mean",
    "image_std",
    "rescale_factor",
    "do_resize",
    "do_rescale",
    "do_normalize",
    "do_convert_rgb",
    "resample",
)


def _normalise_keys(source: Mapping[str, Any], *, base: QwenImageConfig) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for key in _PLAIN_KEYS:
        value = source.get(key)
        if value is not None:
            changes[key] = value
    if "resample" in changes:
        changes["resample"] = int(changes["resample"])
    if "rescale_factor" in changes:
        changes["rescale_factor"] = float(changes["rescale_factor"])
    min_pixels, max_pixels = base.min_pixels, base.max_pixels
    size = source.get("size")
    if size is not None:
        size = dict(size) if isinstance(size, Mapping) else _size_attrs(size)
        if size.get("shortest_edge") is not None:
            min_pixels = size["shortest_edge"]
        if size.get("longest_edge") is not None:
            max_pixels = size["longest_edge"]
        if size.get("min_pixels") is not None:
            min_pixels = size["min_pixels"]
        if size.get("max_pixels") is not None:
            max_pixels = size["max_pixels"]
    if source.get("min_pixels") is not None:
        min_pixels = source["min_pixels"]
    if source.get("max_pixels") is not None:
        max_pixels = source["max_pixels"]
    if min_pixels != base.min_pixels:
        changes["min_pixels"] = min_pixels
    if max_pixels != base.max_pixels:
        changes["max_pixels"] = max_pixels
    return changes


def _size_attrs(size: Any) -> dict[str, Any]:
    # transformers' SizeDict is a dataclass, not a Mapping.
    keys = ("shortest_edge", "longest_edge", "min_pixels", "max_pixels")
    found = {key: getattr(size, key, None) for key in keys}
    if all(value is None for value in found.values()):
        raise QwenConfigError(f"size must give shortest_edge/longest_edge, got {size!r}")
    return found
