"""Device-side LUT normalization (vLLM ``vllm-kimi-device-normalize``) equals the CPU result.

The API server ships uint8 patches and ``DeviceNormalizer`` turns them into float32 on the GPU
through the checkpoint's 256-entry table. The claim: bit-identical (``torch.equal``) to what the
CPU would have computed, for Kimi K2.5's mean=std=0.5 and for CLIP's statistics. The reference
is the checkpoint's own float arithmetic on the CPU (float64 divide, float32 cast, float64
subtract/multiply stored to float32), not the table itself.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from ._result import StepContext, StepResult

STATS = {
    "kimi_k25": ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    "clip": ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]),
}


def cpu_reference(pixels: np.ndarray, mean: list[float], std: list[float]) -> np.ndarray:
    """The checkpoint's arithmetic on uint8 ``[N, 3, p, p]``, channel by channel, on the CPU."""
    out = np.empty(pixels.shape, dtype=np.float32)
    for c in range(3):
        x = (pixels[:, c].astype(np.float64) / 255.0).astype(np.float32)
        x = (x.astype(np.float64) - float(mean[c])).astype(np.float32)
        out[:, c] = (x.astype(np.float64) * (1.0 / float(std[c]))).astype(np.float32)
    return out


def _patches(ctx: StepContext) -> np.ndarray:
    """Every byte value on every channel, then random patches (a 2048x2048 image on CUDA)."""
    n = 256 if ctx.quick or not ctx.cuda else 16384
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (n, 3, 14, 14), dtype=np.uint8)
    pixels[:2].reshape(2, 3, -1)[:, :, :128] = np.arange(256, dtype=np.uint8).reshape(2, 1, 128)
    return pixels


def run(ctx: StepContext, result: StepResult) -> None:
    if not ctx.cuda:  # the dry run: the numpy kernel (same output) spares a numba compile
        os.environ.setdefault("VLM_FASTPATH_NUMBA", "0")
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.kimi_integration.normalize_lut import build_normalize_lut
    from vlm_fastpath.patches.vllm.device_normalize.models_kimi_k25 import DeviceNormalizer

    device = torch.device(ctx.device)
    pixels = _patches(ctx)
    for label, (mean, std) in STATS.items():
        expected = torch.from_numpy(cpu_reference(pixels, mean, std))
        normalizer = DeviceNormalizer(build_normalize_lut(mean, std), torch.float32)
        on_cpu = normalizer.to_float32(torch.from_numpy(pixels))
        result.check(f"{label}: CPU table == CPU arithmetic", torch.equal(on_cpu, expected))
        if not ctx.cuda:
            result.skip(f"{label}: table on CUDA == CPU arithmetic")
            continue
        uint8 = torch.from_numpy(pixels).to(device)
        normalizer.to_float32(uint8)  # warm-up: the table moves to the device once
        torch.cuda.synchronize()
        start = time.perf_counter()
        got = normalizer.to_float32(uint8)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        got = got.cpu()
        if ctx.wrong():
            got.view(-1)[7] += 1e-3
        result.check(f"{label}: table on CUDA == CPU arithmetic", torch.equal(got, expected),
                     patches=int(pixels.shape[0]))
        result.measure(f"{label}_cuda_ms", round(ms, 3))
        bf16 = DeviceNormalizer(build_normalize_lut(mean, std), torch.bfloat16).normalize(uint8)
        result.check(f"{label}: bf16 transport cast on CUDA == CPU cast",
                     torch.equal(bf16.cpu(), expected.to(torch.bfloat16)))

    # End to end for K2.5: the processor's uint8 output normalized on the device equals its own
    # float32 output (what the API server would have shipped without the patch).
    proc = FusedKimiProcessor.from_dict({"media_proc_cfg": {
        "patch_size": 14, "merge_kernel_size": [2, 2], "in_patch_limit": 16384,
        "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
        "in_patch_limit_each_frame": 4096, "in_patch_limit_video": None,
        "temporal_merge_kernel_size": 4, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}})
    side = 320 if ctx.quick or not ctx.cuda else 1536
    image = np.random.default_rng(1).integers(0, 256, (side, side, 3), dtype=np.uint8)
    media = [{"type": "image", "image": image}]
    eager = proc.preprocess(media)["pixel_values"]
    raw = proc.preprocess(media, do_rescale=False, do_normalize=False)["pixel_values"]
    normalizer = DeviceNormalizer(proc.normalize_lut, torch.float32)
    got = normalizer.to_float32(raw.to(device)).cpu()
    if ctx.wrong() and not ctx.cuda:
        got.view(-1)[3] = -got.view(-1)[3]
    result.check(f"K2.5 processor: uint8 -> table on {ctx.device} == float32 output",
                 torch.equal(got, eager), image=f"{side}x{side}")
