"""Read our settings off a live transformers Qwen2-VL image processor (torchvision or PIL).

The engines hand out transformers' processor objects; ``config_from_hf`` turns one into a
``QwenImageConfig`` (or says, with a ``QwenConfigError``, which setting we do not reproduce),
and ``mode_of`` says whose arithmetic it runs. ``compat.check_compatible`` then proves the
result exact on probe images.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import BICUBIC, PIL, TORCHVISION, QwenImageConfig
from .errors import QwenConfigError

SUPPORTED_CLASSES = frozenset(
    {"Qwen2VLImageProcessor", "Qwen2VLImageProcessorPil", "Qwen2VLImageProcessorFast"}
)
# Settings our processor does not reproduce; a truthy value on the HF side means stand aside.
_UNSUPPORTED_TRUTHY = ("do_pad", "do_center_crop")


def mode_of(hf_processor: Any) -> str:
    """Whose arithmetic ``hf_processor`` runs: torchvision's or PIL's."""
    backend = getattr(hf_processor, "backend", None)
    if backend in (TORCHVISION, PIL):
        return str(backend)
    name = type(hf_processor).__name__
    if name.endswith("Fast"):
        return TORCHVISION
    return PIL


def _resample_of(value: Any) -> int:
    if value is None:
        return BICUBIC
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.upper() == "BICUBIC":
        return BICUBIC
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _size_of(size: Any) -> dict[str, Any]:
    if size is None:
        return {}
    if isinstance(size, Mapping):
        return {k: v for k, v in size.items() if v is not None}
    keys = ("shortest_edge", "longest_edge")
    return {k: getattr(size, k) for k in keys if getattr(size, k, None) is not None}


def config_from_hf(hf_processor: Any) -> QwenImageConfig:
    """Our config for a transformers Qwen2-VL image processor (torchvision or PIL backed)."""
    name = type(hf_processor).__name__
    if name not in SUPPORTED_CLASSES:
        raise QwenConfigError(f"unsupported image processor class {name}")
    for key in _UNSUPPORTED_TRUTHY:
        if getattr(hf_processor, key, None):
            raise QwenConfigError(f"{name} has {key}={getattr(hf_processor, key)!r}")
    device = getattr(hf_processor, "device", None)
    if device is not None and str(device) != "cpu":
        raise QwenConfigError(f"{name} processes on device {device!r}; only CPU is reproduced")
    size = _size_of(getattr(hf_processor, "size", None))
    data: dict[str, Any] = {
        "size": size,
        "min_pixels": getattr(hf_processor, "min_pixels", None),
        "max_pixels": getattr(hf_processor, "max_pixels", None),
        "resample": _resample_of(getattr(hf_processor, "resample", None)),
    }
    if "shortest_edge" in size:
        data["min_pixels"] = size["shortest_edge"]
    if "longest_edge" in size:
        data["max_pixels"] = size["longest_edge"]
    for key in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std",
                "rescale_factor", "do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
        data[key] = getattr(hf_processor, key, None)
    return QwenImageConfig.from_dict(data, mode=mode_of(hf_processor))
