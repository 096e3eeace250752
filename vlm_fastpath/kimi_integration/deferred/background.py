"""What transparent pixels become: Kimi K2.5 drops alpha, Kimi K3 fills a background.

K2.5/K2.6 (the checkpoint's processor) calls ``convert("RGB")``: alpha is dropped, the colour
under a transparent pixel shows (``mode="drop"``, the default). Kimi K3 composites images
that carry transparency onto a configured background: ``white`` (255), ``black`` (0),
``gray`` (128) or a ``chessboard`` (squares of 16 px, levels 255 and 200, the top-left square
the light one unless ``chessboard_square_on_top_left`` is false). The blend is SGLang's K3
arithmetic (``kimi_k3_image_processing.fill_transparent_bg``, 0.5.17+) in float32,
``floor(clamp(a/255 * rgb + (1 - a/255) * bg, 0, 255))`` (the checkpoint casts with
``astype(np.uint8)``, which truncates). Elementwise, but not the same bytes on every device:
CUDA divides a tensor by a Python number as a multiplication by its float32 reciprocal, one
ulp off the CPU's quotient for some levels, one level off after the floor (seen on an H200).
The K3 recipe keeps the release's ops, so it equals SGLang's own K3 op on the device it runs
on (SGLang preprocesses K3 on CUDA); the K2.5 recipe's uint8 fill reads ``a/255`` from a table
divided on the CPU, so its owner on any device equals its eager CPU path.

The checkpoint's ``transparent_bg_config`` dict (``pattern``,
``chessboard_square_size``, ``chessboard_white_value``, ``chessboard_gray_value``,
``chessboard_square_on_top_left``, ``transparent_bg_fill_stage``) is accepted as is; ``None``
drops alpha.

Where the fill runs is the recipe's (:mod:`.processor`): the release's K3 recipe
(``recipe="k3"``) fills *after* the resize, on the resized float RGBA
(:func:`fill_transparent_bg_float`, exactly SGLang's ops and dtype); the K2.5 recipe with a
fill configured composites the full-size uint8 image *before* its Pillow resize
(:func:`fill_transparent_bg`), which is no release's arithmetic for RGBA inputs.
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
    image being filled; ``light``/``dark``: the chessboard's two levels (the top-left square is
    ``light`` when ``light_top_left``, else ``dark``). Defaults are K3's.
    """

    mode: str = "drop"
    gray_level: int = 128
    square: int = 16
    light: int = 255
    dark: int = 200
    light_top_left: bool = True

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
        if isinstance(value, Mapping) and ("pattern" in value or any(
                str(key).startswith(("chessboard_", "transparent_bg")) for key in value)):
            return cls.from_checkpoint(value)
        if isinstance(value, Mapping):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise KimiConfigError(f"unknown background config key(s): {sorted(unknown)}")
            return cls(**dict(value))
        raise KimiConfigError(
            f"background config must be None, a mode name or a dict, got {type(value).__name__}"
        )

    @classmethod
    def from_checkpoint(cls, cfg: Mapping[str, Any] | None) -> BackgroundConfig:
        """The Kimi K3 checkpoint's ``transparent_bg_config`` (``None``: alpha dropped)."""
        if cfg is None:
            return cls()
        known = {"pattern", "chessboard_square_size", "chessboard_white_value",
                 "chessboard_gray_value", "chessboard_square_on_top_left",
                 "transparent_bg_fill_stage"}
        unknown = set(cfg) - known
        if unknown:
            raise KimiConfigError(f"unknown transparent_bg_config key(s): {sorted(unknown)}")
        return cls(
            mode=cfg.get("pattern", "black"),
            square=cfg.get("chessboard_square_size", 16),
            light=cfg.get("chessboard_white_value", 255),
            dark=cfg.get("chessboard_gray_value", 200),
            light_top_left=bool(cfg.get("chessboard_square_on_top_left", True)),
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
        light_parity = 0 if bg.light_top_left else 1
        return torch.where(odd == light_parity, bg.light, bg.dark).to(torch.int32)
    level = {"white": 255, "black": 0, "gray": bg.gray_level}.get(bg.mode)
    if level is None:
        raise KimiConfigError(f"background mode {bg.mode!r} has no fill plane")
    return torch.full((height, width), level, dtype=torch.int32, device=device)


# a/255 for a = 0..255, divided on the CPU (correctly rounded); per device, copied once.
_ALPHA_TABLE = torch.arange(256, dtype=torch.float32) / 255.0
_ALPHA_ON: dict[str, torch.Tensor] = {"cpu": _ALPHA_TABLE}


def _alpha_table(device: torch.device) -> torch.Tensor:
    table = _ALPHA_ON.get(str(device))
    if table is None:  # a race only copies the 1 KiB table twice
        table = _ALPHA_ON.setdefault(str(device), _ALPHA_TABLE.to(device, non_blocking=True))
    return table


def _blend(rgb: torch.Tensor, alpha: torch.Tensor, bg: BackgroundConfig) -> torch.Tensor:
    """``floor(clamp(a * rgb + (1 - a) * bg, 0, 255))`` in float32 (K3's blend)."""
    plane = background_plane(bg, rgb.shape[-2], rgb.shape[-1], rgb.device).to(rgb.dtype)
    return (alpha * rgb + (1.0 - alpha) * plane).clamp(0.0, 255.0).floor_()


def fill_transparent_bg(x: torch.Tensor, bg_config: BackgroundConfig | Any) -> torch.Tensor:
    """uint8 ``[..., C, H, W]`` -> uint8 ``[..., 3, H, W]`` with transparency resolved.

    ``C`` is 1 (gray: replicated), 3 (returned as is) or 4 (RGBA: alpha dropped for
    ``drop``, else blended onto the background with K3's float32 arithmetic, ``a/255`` read
    from a table divided on the CPU: the same bytes on every device, see the module docstring).
    """
    if x.dtype != torch.uint8 or x.dim() < 3:
        raise ValueError(f"expected uint8 [..., C, H, W], got {x.dtype} {tuple(x.shape)}")
    if x.shape[-3] == 3:
        return x  # the common case: nothing to resolve, no float round trip
    bg = BackgroundConfig.from_config(bg_config)
    if x.shape[-3] == 4 and bg.needs_alpha:
        alpha = _alpha_table(x.device)[x[..., 3:4, :, :].long()]
        return _blend(x[..., :3, :, :].to(torch.float32), alpha, bg).to(torch.uint8)
    # Exact: the float op's inputs and outputs are integers in 0..255.
    return fill_transparent_bg_float(x.to(torch.float32), bg).to(torch.uint8)


def fill_transparent_bg_float(x: torch.Tensor, bg_config: BackgroundConfig | Any) -> torch.Tensor:
    """float32 ``[..., C, H, W]`` (values in 0..255) -> float32 ``[..., 3, H, W]``.

    SGLang's K3 ``fill_transparent_bg`` op for op: 3 channels pass through; 4 channels lose
    alpha (``drop``) or become ``floor(clamp(a * rgb + (1 - a) * bg, 0, 255))`` with
    ``a = clamp(alpha / 255, 0, 1)``, all in float32. The K3 recipe calls it on the resized
    (rounded, clamped) float image; 1 channel (gray) is replicated.
    """
    bg = BackgroundConfig.from_config(bg_config)
    if not x.is_floating_point() or x.dim() < 3:
        raise ValueError(f"expected float [..., C, H, W], got {x.dtype} {tuple(x.shape)}")
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
    # The release's op, as it runs on x's device (a Python divisor: see the module docstring).
    return _blend(rgb, (x[..., 3:4, :, :] / 255.0).clamp(0.0, 1.0), bg)
