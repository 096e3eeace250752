"""Test oracle: the Kimi K2.5/K2.6 image arithmetic written straight from the spec.

Source: shared/UPSTREAM.md section 4 (the checkpoint's own processor). Deliberately naive:
float64 Python arithmetic for the size, Pillow for the resize, ``np.pad`` for padding, the
spec's numpy float ops on the whole image, reshape/transpose for patchify. It shares no code
with ``vlm_fastpath`` so a bug there cannot hide here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image


def ref_resize_target(width, height, cfg, in_patch_limit=None):
    p = cfg["patch_size"]
    merge = cfg["merge_kernel_size"]
    if isinstance(merge, (list, tuple)):
        merge = merge[0]
    side = cfg["patch_limit_on_one_side"]
    limit = cfg["in_patch_limit"] if in_patch_limit is None else in_patch_limit
    s1 = math.sqrt(limit / (max(1, width // p) * max(1, height // p)))
    s2 = side * p / width
    s3 = side * p / height
    scale = min(1, s1, s2, s3)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    f = merge * p
    pad_w = (f - new_w % f) % f
    pad_h = (f - new_h % f) % f
    fixed = cfg.get("fixed_output_tokens")
    tokens = fixed if fixed else ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
    return new_w, new_h, pad_w, pad_h, tokens


def ref_video_limit(cfg, frames):
    limit = cfg.get("in_patch_limit_each_frame")
    if limit is None:
        limit = cfg["in_patch_limit"]
    total = cfg.get("in_patch_limit_video")
    if total is not None:
        limit = min(round(total / frames), limit)
    return limit


def ref_normalize(arr_uint8, cfg):
    x = (arr_uint8 / 255.0).astype(np.float32)
    x -= np.array(cfg["image_mean"], dtype=np.float64)
    x *= 1.0 / np.array(cfg["image_std"], dtype=np.float64)
    return x


def ref_patchify(frames, p):
    # frames: (T, H, W, C) -> (T, H/p, p, W/p, p, C) -> (0,1,3,5,2,4) -> (N, C, p, p)
    t, h, w, c = frames.shape
    x = frames.reshape(t, h // p, p, w // p, p, c).transpose(0, 1, 3, 5, 2, 4)
    return x.reshape(-1, c, p, p)


def ref_process_frames(images, cfg, target, uint8=False):
    new_w, new_h, pad_w, pad_h, _ = target
    arrays = []
    for image in images:
        rgb = image.convert("RGB")
        resized = rgb.resize((new_w, new_h), Image.BICUBIC)
        arr = np.array(resized, dtype=np.uint8)
        arr = np.pad(arr, ((0, pad_h), (0, pad_w), (0, 0)), mode="constant", constant_values=0)
        arrays.append(arr if uint8 else ref_normalize(arr, cfg))
    frames = np.stack(arrays)
    patches = ref_patchify(frames, cfg["patch_size"])
    p = cfg["patch_size"]
    grid = [len(images), (new_h + pad_h) // p, (new_w + pad_w) // p]
    return patches, grid


def ref_preprocess(medias, cfg, uint8=False):
    """Return (pixel_values tensor, grid_thws tensor, tokens list) for PIL-image medias."""
    all_patches, grids, tokens = [], [], []
    for media in medias:
        if media["type"] == "image":
            images = [media["image"]]
            target = ref_resize_target(*images[0].size, cfg)
        else:
            images = list(media["video_chunk"])
            limit = ref_video_limit(cfg, len(images))
            target = ref_resize_target(*images[0].size, cfg, in_patch_limit=limit)
        patches, grid = ref_process_frames(images, cfg, target, uint8=uint8)
        all_patches.append(patches)
        grids.append(grid)
        tokens.append(target[4])
    pixel_values = torch.from_numpy(np.ascontiguousarray(np.concatenate(all_patches)))
    return pixel_values, torch.tensor(grids, dtype=torch.int64), tokens


KIMI_K25_CFG = {
    "patch_size": 14,
    "merge_kernel_size": [2, 2],
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "temporal_merge_kernel_size": 4,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}

CLIP_CFG = dict(
    KIMI_K25_CFG,
    image_mean=[0.48145466, 0.4578275, 0.40821073],
    image_std=[0.26862954, 0.26130258, 0.27577711],
)
