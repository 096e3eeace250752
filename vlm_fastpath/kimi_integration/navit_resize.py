"""Kimi's NaViT resize policy: how big an image becomes and how many tokens it costs.

Pure integer/float64 arithmetic, identical to the checkpoint's processor, so token counts
computed here agree with what the model sees. See shared/UPSTREAM.md section 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import KimiMediaConfig
from .errors import KimiInputError


@dataclass(frozen=True)
class ResizePlan:
    """Target size, right/bottom padding and token count of one image or video chunk."""

    new_width: int
    new_height: int
    pad_width: int
    pad_height: int
    num_tokens: int
    patch_size: int
    num_frames: int = 1

    @property
    def padded_width(self) -> int:
        return self.new_width + self.pad_width

    @property
    def padded_height(self) -> int:
        return self.new_height + self.pad_height

    @property
    def grid_h(self) -> int:
        return self.padded_height // self.patch_size

    @property
    def grid_w(self) -> int:
        return self.padded_width // self.patch_size

    @property
    def patches_per_frame(self) -> int:
        return self.grid_h * self.grid_w

    @property
    def num_patches(self) -> int:
        return self.num_frames * self.patches_per_frame

    @property
    def grid_thw(self) -> tuple[int, int, int]:
        return (self.num_frames, self.grid_h, self.grid_w)


def navit_resize_image(
    width: int,
    height: int,
    *,
    patch_size: int,
    merge_kernel_size: int,
    in_patch_limit: int,
    patch_limit_on_one_side: int,
    fixed_output_tokens: int | None = None,
) -> ResizePlan:
    """Shrink (never grow) so the patch count and each side stay within the limits."""
    if width <= 0 or height <= 0:
        raise KimiInputError(f"image size must be positive, got {width}x{height}")
    p = patch_size
    side = patch_limit_on_one_side
    by_count = math.sqrt(in_patch_limit / (max(1, width // p) * max(1, height // p)))
    scale = min(1.0, by_count, side * p / width, side * p / height)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    factor = merge_kernel_size * p
    pad_w = (factor - new_w % factor) % factor
    pad_h = (factor - new_h % factor) % factor
    if fixed_output_tokens is not None:
        tokens = fixed_output_tokens
    else:
        tokens = ((new_h + pad_h) // factor) * ((new_w + pad_w) // factor)
    return ResizePlan(new_w, new_h, pad_w, pad_h, tokens, p)


def plan_image(cfg: KimiMediaConfig, width: int, height: int) -> ResizePlan:
    """Resize plan of a single image under ``cfg``."""
    return navit_resize_image(
        width,
        height,
        patch_size=cfg.patch_size,
        merge_kernel_size=cfg.merge_kernel_size,
        in_patch_limit=cfg.in_patch_limit,
        patch_limit_on_one_side=cfg.patch_limit_on_one_side,
        fixed_output_tokens=cfg.fixed_output_tokens,
    )


def plan_video_chunk(cfg: KimiMediaConfig, width: int, height: int, num_frames: int) -> ResizePlan:
    """Resize plan of a video chunk: every frame gets frame 0's size under the per-frame limit.

    The token count is that of one frame: the encoder merges ``temporal_merge_kernel_size``
    frames into one.
    """
    if num_frames <= 0:
        raise KimiInputError("a video chunk needs at least one frame")
    per_frame = cfg.in_patch_limit_each_frame
    if per_frame is None:
        per_frame = cfg.in_patch_limit
    if cfg.in_patch_limit_video is not None:
        per_frame = min(round(cfg.in_patch_limit_video / num_frames), per_frame)
    if per_frame <= 0:
        raise KimiInputError(
            f"in_patch_limit_video={cfg.in_patch_limit_video} leaves no patches for "
            f"{num_frames} frames"
        )
    plan = navit_resize_image(
        width,
        height,
        patch_size=cfg.patch_size,
        merge_kernel_size=cfg.merge_kernel_size,
        in_patch_limit=per_frame,
        patch_limit_on_one_side=cfg.patch_limit_on_one_side,
        fixed_output_tokens=cfg.fixed_output_tokens,
    )
    return ResizePlan(
        plan.new_width,
        plan.new_height,
        plan.pad_width,
        plan.pad_height,
        plan.num_tokens,
        plan.patch_size,
        num_frames,
    )
