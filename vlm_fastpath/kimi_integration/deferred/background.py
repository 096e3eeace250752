"""What transparent pixels become: Kimi K2.5 drops alpha, Kimi K3 fills a background.

K2.5/K2.6 (the checkpoint's processor) calls ``convert("RGB")``: alpha is dropped, the colour
under a transparent pixel shows (``mode="drop"``, the default). Kimi K3 composites images
that carry transparency onto a configured background before resizing: ``white``, ``black``,
``gray`` or a ``chessboard``. The blend is integer arithmetic,
``(rgb * a + bg * (255 - a) + 127) // 255``, so it gives the same bytes on every device and
the eager and deferred paths agree exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..errors import KimiConfigError

MODES = ("drop", "white", "black", "gray", "chessboard")


def _byte(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise KimiConfigError(f"background {name} must be an int in 0..255, got {value!r}")
    return value


@dataclass(frozen=True)
class BackgroundConfig:
    """How to fill transparent pixels (see the module docstring).

    ``gray_level``: the ``gray`` fill. ``square``: chessboard square side in pixels of the
    original image; ``light``/``dark``: the chessboard's two levels (the top-left square is
    ``light``).
    """

    mode: str = "drop"
    gray_level: int = 128
    square: int = 8
    light: int = 255
    dark: int = 204

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise KimiConfigError(f"background mode must be one of {MODES}, got {self.mode!r}")
        for name in ("gray_level", "light", "dark"):
            _byte(name, getattr(self, name))
        if isinstance(self.square, bool) or not isinstance(self.square, int) or self.square <= 0:
            raise KimiConfigError(f"chessboard square must be a positive int, got {self.square!r}")

    @classmethod
    def from_config(cls, value: Any) -> BackgroundConfig:
        """Accept ``None`` (drop), a mode name, a dict of fields, or a ``BackgroundConfig``."""
        if value is None:
            return cls()
        if isinstance(value, BackgroundConfig):
            return value
        if isinstance(value, str):
            return cls(mode=value)
        if isinstance(value, Mapping):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise KimiConfigError(f"unknown background config key(s): {sorted(unknown)}")
            return cls(**dict(value))
        raise KimiConfigError(
            f"background config must be None, a mode name or a dict, got {type(value).__name__}"
        )

    @property
    def needs_alpha(self) -> bool:
        """True when transparent pixels change colour (anything but ``drop``)."""
        return self.mode != "drop"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


K25_BACKGROUND = BackgroundConfig("drop")


def background_plane(bg: BackgroundConfig, height: int, width: int,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """int32 ``[H, W]`` background levels (one level for all three channels)."""
    if bg.mode == "chessboard":
        ys = torch.arange(height, device=device, dtype=torch.int32) // bg.square
        xs = torch.arange(width, device=device, dtype=torch.int32) // bg.square
        odd = (ys[:, None] + xs[None, :]) % 2
        return torch.where(odd == 0, bg.light, bg.dark).to(torch.int32)
    level = {"white": 255, "black": 0, "gray": bg.gray_level}.get(bg.mode)
    if level is None:
        raise KimiConfigError(f"background mode {bg.mode!r} has no fill plane")
    return torch.full((height, width), level, dtype=torch.int32, device=device)


def fill_transparent_bg(x: torch.Tensor, bg_config: BackgroundConfig | Any) -> torch.Tensor:
    """uint8 ``[..., C, H, W]`` -> uint8 ``[..., 3, H, W]`` with transparency resolved.

    ``C`` is 1 (gray: replicated), 3 (returned as is) or 4 (RGBA: alpha dropped for
    ``drop``, else blended onto the background). Exact integer arithmetic on any device.
    """
    bg = BackgroundConfig.from_config(bg_config)
    if x.dtype != torch.uint8 or x.dim() < 3:
        raise ValueError(f"expected uint8 [..., C, H, W], got {x.dtype} {tuple(x.shape)}")
    channels = x.shape[-3]
    if channels == 3:
        return x
    if channels == 1:
        return x.expand(*x.shape[:-3], 3, *x.shape[-2:])
    if channels != 4:
        raise ValueError(f"expected 1, 3 or 4 channels, got {channels}")
    rgb = x[..., :3, :, :]
    if not bg.needs_alpha:
        return rgb
    alpha = x[..., 3:4, :, :].to(torch.int32)
    plane = background_plane(bg, x.shape[-2], x.shape[-1], x.device)
    blended = (rgb.to(torch.int32) * alpha + plane * (255 - alpha) + 127) // 255
    return blended.to(torch.uint8)
