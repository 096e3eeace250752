"""Stand-in for a Kimi K2.5 checkpoint's remote-code image processor (test fixture).

Copied into the temporary model folder and loaded by transformers through ``auto_map`` with
``trust_remote_code=True``, as vLLM <= 0.24 loads the real checkpoint's. Written from the spec
(shared/UPSTREAM.md section 4) in plain numpy; it imports nothing from vlm_fastpath or vLLM.
"""

import math

import numpy as np
import torch
from PIL import Image
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class KimiTestImageProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values", "grid_thws"]

    def __init__(self, media_proc_cfg=None, **kwargs):
        super().__init__(**kwargs)
        self.media_proc_cfg = dict(media_proc_cfg or {})
        self.num_frames_per_chunk = self.media_proc_cfg["temporal_merge_kernel_size"]

    def _target(self, width, height, limit):
        cfg = self.media_proc_cfg
        p = cfg["patch_size"]
        merge = cfg["merge_kernel_size"]
        merge = merge[0] if isinstance(merge, (list, tuple)) else merge
        side = cfg["patch_limit_on_one_side"]
        s1 = math.sqrt(limit / (max(1, width // p) * max(1, height // p)))
        scale = min(1, s1, side * p / width, side * p / height)
        new_w = min(max(1, int(width * scale)), side * p)
        new_h = min(max(1, int(height * scale)), side * p)
        f = merge * p
        pad_w, pad_h = (f - new_w % f) % f, (f - new_h % f) % f
        tokens = cfg.get("fixed_output_tokens") or ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
        return new_w, new_h, pad_w, pad_h, tokens

    def _frames(self, media):
        if media["type"] == "image":
            return [media["image"]], self.media_proc_cfg["in_patch_limit"]
        frames = list(media["video_chunk"])
        limit = self.media_proc_cfg.get("in_patch_limit_each_frame")
        return frames, limit or self.media_proc_cfg["in_patch_limit"]

    def media_tokens_calculator(self, media):
        frames, limit = self._frames(media)
        return self._target(*frames[0].size, limit)[4]

    def preprocess(self, medias, return_tensors=None, **kwargs):
        cfg = self.media_proc_cfg
        p = cfg["patch_size"]
        mean = np.array(cfg["image_mean"], dtype=np.float64)
        inv_std = 1.0 / np.array(cfg["image_std"], dtype=np.float64)
        patches, grids = [], []
        for media in medias:
            frames, limit = self._frames(media)
            new_w, new_h, pad_w, pad_h, _ = self._target(*frames[0].size, limit)
            arrays = []
            for frame in frames:
                arr = np.asarray(frame.convert("RGB").resize((new_w, new_h), Image.BICUBIC))
                arr = np.pad(arr, ((0, pad_h), (0, pad_w), (0, 0)))
                x = (arr / 255.0).astype(np.float32)
                x -= mean
                x *= inv_std
                arrays.append(x)
            x = np.stack(arrays)
            t, h, w, c = x.shape
            x = x.reshape(t, h // p, p, w // p, p, c).transpose(0, 1, 3, 5, 2, 4)
            patches.append(x.reshape(-1, c, p, p))
            grids.append([t, h // p, w // p])
        data = {
            "pixel_values": torch.from_numpy(np.ascontiguousarray(np.concatenate(patches))),
            "grid_thws": torch.tensor(grids, dtype=torch.int64),
        }
        return BatchFeature(data=data, tensor_type=return_tensors)
