"""Deterministic media batches shared by in-process tests and subprocess scripts.

Importable without pytest (subprocess scripts put the repo root on ``PYTHONPATH``). It builds
inputs only; it never imports ``vlm_fastpath`` (callers pass the processor in).
"""

from __future__ import annotations

from PIL import Image

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG

from .helpers import img, rand_array, video

ODD_SIZES = [(1, 1), (13, 13), (27, 29), (100, 37), (641, 479), (1531, 1203), (7200, 300)]


def odd_images(seed: int = 0) -> list[Image.Image]:
    return [Image.fromarray(rand_array(seed + i, w, h)) for i, (w, h) in enumerate(ODD_SIZES)]


def backend_batches(seed: int = 0) -> dict[str, list[dict]]:
    """Single items (one frame: the parallel kernel) and batches (many frames: the pool path)."""
    images = odd_images(seed)
    frames = [Image.fromarray(rand_array(seed + 50 + i, 333, 187)) for i in range(3)]
    batches = {f"single-{w}x{h}": [img(im)] for (w, h), im in zip(ODD_SIZES, images, strict=True)}
    batches["batch-all"] = [img(im) for im in images]
    batches["batch-video"] = [img(images[4]), video(frames), img(images[2])]
    return batches


def run_backend_cases(processor_cls, seed: int = 0) -> dict[str, object]:
    """Outputs of every batch, float32 (Kimi and CLIP stats) and uint8, keyed by name."""
    results: dict[str, object] = {}
    for cfg_name, cfg in (("kimi", KIMI_K25_CFG), ("clip", CLIP_CFG)):
        proc = processor_cls(cfg)
        for name, medias in backend_batches(seed).items():
            out = proc.preprocess(medias)
            results[f"{cfg_name}-f32-{name}"] = (out["pixel_values"], out["grid_thws"])
            if cfg_name == "kimi":
                out = proc.preprocess(medias, do_rescale=False, do_normalize=False)
                results[f"{cfg_name}-u8-{name}"] = (out["pixel_values"], out["grid_thws"])
    return results


# A K3-like media_proc_cfg (CLIP statistics so every channel normalizes differently; the small
# patch limit makes most test images downscale) and the checkpoint's chessboard
# transparent_bg_config form. Shared by the core K3 tests and the SGLang K3 engine tests.
K3_CFG = {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 256,
          "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
          "image_mean": [0.48145466, 0.4578275, 0.40821073],
          "image_std": [0.26862954, 0.26130258, 0.27577711]}
K3_CHESSBOARD = {"pattern": "chessboard", "chessboard_square_size": 16,
                 "chessboard_white_value": 255, "chessboard_gray_value": 200,
                 "chessboard_square_on_top_left": True,
                 "transparent_bg_fill_stage": "after_resize"}
