"""The checkpoint's ``media_proc_cfg`` as a validated, immutable value.

Engines pass this dict around untyped; validating it once up front turns a missing key into
one clear error instead of a ``KeyError`` deep inside a worker.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import KimiConfigError

_REQUIRED = ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side")


def _positive_int(name: str, value: Any, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, (list, tuple)) and name == "merge_kernel_size":
        if not value or len(set(value)) != 1:
            raise KimiConfigError(f"media_proc_cfg[{name!r}] must be square, got {value!r}")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KimiConfigError(f"media_proc_cfg[{name!r}] must be a positive int, got {value!r}")
    return int(value)


def _triple(name: str, value: Any, *, nonzero: bool) -> tuple[float, float, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    try:
        floats = tuple(float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise KimiConfigError(f"media_proc_cfg[{name!r}] must be 3 numbers, got {value!r}") from exc
    if len(floats) != 3 or not all(math.isfinite(v) for v in floats):
        raise KimiConfigError(f"media_proc_cfg[{name!r}] must be 3 finite numbers, got {value!r}")
    if nonzero and any(v == 0.0 for v in floats):
        raise KimiConfigError(f"media_proc_cfg[{name!r}] must not contain 0, got {value!r}")
    return floats  # type: ignore[return-value]


@dataclass(frozen=True)
class KimiMediaConfig:
    """Resize/normalize settings of a Kimi K2.5/K2.6 checkpoint (``media_proc_cfg``)."""

    patch_size: int = 14
    merge_kernel_size: int = 2
    in_patch_limit: int = 16384
    patch_limit_on_one_side: int = 512
    fixed_output_tokens: int | None = None
    in_patch_limit_each_frame: int | None = 4096
    in_patch_limit_video: int | None = None
    temporal_merge_kernel_size: int = 4
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | KimiMediaConfig) -> KimiMediaConfig:
        """Validate a ``media_proc_cfg`` dict; unknown keys are ignored, required ones enforced."""
        if isinstance(cfg, KimiMediaConfig):
            return cfg
        if not isinstance(cfg, Mapping):
            raise KimiConfigError(f"media_proc_cfg must be a mapping, got {type(cfg).__name__}")
        missing = [k for k in (*_REQUIRED, "image_mean", "image_std") if k not in cfg]
        if missing:
            raise KimiConfigError(f"media_proc_cfg is missing required key(s): {missing}")
        return cls(
            patch_size=_positive_int("patch_size", cfg["patch_size"]),
            merge_kernel_size=_positive_int("merge_kernel_size", cfg["merge_kernel_size"]),
            in_patch_limit=_positive_int("in_patch_limit", cfg["in_patch_limit"]),
            patch_limit_on_one_side=_positive_int(
                "patch_limit_on_one_side", cfg["patch_limit_on_one_side"]
            ),
            fixed_output_tokens=_positive_int(
                "fixed_output_tokens", cfg.get("fixed_output_tokens"), optional=True
            ),
            in_patch_limit_each_frame=_positive_int(
                "in_patch_limit_each_frame", cfg.get("in_patch_limit_each_frame"), optional=True
            ),
            in_patch_limit_video=_positive_int(
                "in_patch_limit_video", cfg.get("in_patch_limit_video"), optional=True
            ),
            temporal_merge_kernel_size=_positive_int(
                "temporal_merge_kernel_size", cfg.get("temporal_merge_kernel_size", 4)
            ),
            image_mean=_triple("image_mean", cfg["image_mean"], nonzero=False),
            image_std=_triple("image_std", cfg["image_std"], nonzero=True),
        )

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str]) -> KimiMediaConfig:
        """Read ``media_proc_cfg`` from a checkpoint folder or a preprocessor_config.json file."""
        file = os.fspath(path)
        if os.path.isdir(file):
            file = os.path.join(file, "preprocessor_config.json")
        try:
            with open(file, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError as exc:
            raise KimiConfigError(f"no preprocessor config at {file}") from exc
        except json.JSONDecodeError as exc:
            raise KimiConfigError(f"{file} is not valid JSON: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise KimiConfigError(f"{file} is not UTF-8 text (a JSON file is): {exc}") from exc
        except OSError as exc:
            raise KimiConfigError(f"cannot read preprocessor config {file}: {exc}") from exc
        if not isinstance(data, dict):
            raise KimiConfigError(f"{file} must hold a JSON object")
        return cls.from_dict(data.get("media_proc_cfg", data))

    def to_dict(self) -> dict[str, Any]:
        """The engine-facing dict form (lists, like the checkpoint's JSON)."""
        return {
            "patch_size": self.patch_size,
            "merge_kernel_size": self.merge_kernel_size,
            "in_patch_limit": self.in_patch_limit,
            "patch_limit_on_one_side": self.patch_limit_on_one_side,
            "fixed_output_tokens": self.fixed_output_tokens,
            "in_patch_limit_each_frame": self.in_patch_limit_each_frame,
            "in_patch_limit_video": self.in_patch_limit_video,
            "temporal_merge_kernel_size": self.temporal_merge_kernel_size,
            "image_mean": list(self.image_mean),
            "image_std": list(self.image_std),
        }
