"""Qwen-VL preprocessing alone and beside a thread that runs Python: ours vs transformers.

Run in an environment with transformers + torchvision (e.g. ``.envs/vllm-0.33.0``):

    python -m benchmarks.beside_busy [--rounds 7]

Why: an API server's event loop runs Python while requests are preprocessed. Every time a
thread of ours returns to Python it waits for the GIL up to the switch interval (5 ms), so a
kernel spread over a pool as one task per band paid that per band; the job loops
(``vlm_fastpath.imaging.job_loop``) pay it about once per call. Rows: the 2048² image
(Qwen2.5-VL's published pixel limits, float32 and uint8), a 4032x3024 photo as a PIL image
in many Pillow blocks (both dtypes), 8 images of 1024x768 in one call (both dtypes), and
Qwen2.5-VL video clips in uint8; then Kimi K2.5
requests of several frames (ours only: alone and busy)
(what vLLM 0.32+ asks for), each output checked ``torch.equal`` against transformers' first.
Timing: ``rounds`` calls of each contender in rotating order, alone, then the same beside
``schedules.busy_python_thread``; medians. On 2 cores the busy thread also takes a core, so
no call can stay at its quiet time; the table shows how much of the slowdown is left.
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.qwen_preprocess import QWEN25_VL, photo_like
from benchmarks.qwen_video import UINT8, photo_clip, processors
from benchmarks.schedules import busy_python_thread, timed_calls

CLIPS = ((32, 1280, 720), (16, 3840, 2160))


def _same(a: Any, b: Any, keys: tuple[str, ...]) -> bool:
    return all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in keys)


def workloads() -> list[tuple[str, dict[str, Callable[[], Any]], tuple[str, ...]]]:
    """(label, {contender: call}, keys compared)."""
    from transformers import Qwen2VLImageProcessor

    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    hf_image = Qwen2VLImageProcessor(**QWEN25_VL)
    ours_image = FastQwen2VLImageProcessor.from_hf(hf_image)
    image = photo_like(3, 2048, 2048)
    out: list[tuple[str, dict[str, Callable[[], Any]], tuple[str, ...]]] = []
    for dtype, kw in (("float32", {}), ("uint8", UINT8)):
        out.append((f"image 2048x2048 {dtype}", {
            "transformers": lambda kw=kw: hf_image(images=[image], return_tensors="pt", **kw),
            "ours": lambda kw=kw: ours_image(images=[image], return_tensors="pt", **kw),
        }, ("pixel_values", "image_grid_thw")))
    # A phone photo: an RGB image in many Pillow blocks (no one-block view), whose rows our
    # kernels copy through Pillow's row table (imaging.pillow_pixels.row_table).
    photo = photo_like(3, 4032, 3024)
    for dtype, kw in (("float32", {}), ("uint8", UINT8)):
        out.append((f"photo 4032x3024 PIL, many blocks, {dtype}", {
            "transformers": lambda kw=kw: hf_image(images=[photo], return_tensors="pt", **kw),
            "ours": lambda kw=kw: ours_image(images=[photo], return_tensors="pt", **kw),
        }, ("pixel_values", "image_grid_thw")))
    # A request of several images: all of them in one job loop (resize_patchify_frames).
    images = [photo_like(3 + i, 1024, 768) for i in range(8)]
    for dtype, kw in (("float32", {}), ("uint8", UINT8)):
        out.append((f"8 images 1024x768 PIL {dtype}", {
            "transformers": lambda kw=kw: hf_image(images=images, return_tensors="pt", **kw),
            "ours": lambda kw=kw: ours_image(images=images, return_tensors="pt", **kw),
        }, ("pixel_values", "image_grid_thw")))
    hf_video, ours_video = processors("qwen2.5-vl")
    for frames, width, height in CLIPS:
        clip = photo_clip(frames, width, height)
        out.append((f"video {frames}x{width}x{height} uint8", {
            "transformers": lambda c=clip: hf_video(videos=[c], return_tensors="pt", **UINT8),
            "ours": lambda c=clip: ours_video(videos=[c], return_tensors="pt", **UINT8),
        }, ("pixel_values_videos", "video_grid_thw")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print("| workload | transformers alone ms | transformers busy ms | ours alone ms | "
          "ours busy ms | speed-up alone | speed-up busy | exact |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for label, fns, keys in workloads():
        exact = _same(fns["ours"](), fns["transformers"](), keys)
        failed |= not exact
        alone = timed_calls(fns, args.rounds, "interleaved")
        with busy_python_thread():
            busy = timed_calls(fns, args.rounds, "interleaved")
        ms = {(n, c): statistics.median(t[n]) * 1e3 for c, t in (("alone", alone),
                                                                  ("busy", busy)) for n in fns}
        print(f"| {label} | {ms['transformers', 'alone']:.1f} | {ms['transformers', 'busy']:.1f}"
              f" | {ms['ours', 'alone']:.1f} | {ms['ours', 'busy']:.1f} | "
              f"{ms['transformers', 'alone'] / ms['ours', 'alone']:.2f}x | "
              f"{ms['transformers', 'busy'] / ms['ours', 'busy']:.2f}x | {exact} |", flush=True)
    print("\nKimi K2.5 (`FusedKimiProcessor`, several frames in one call; no transformers "
          "processor to compare)\n")
    print("| workload | ours alone ms | ours busy ms |\n|---|---|---|")
    for label, call in kimi_workloads():
        call()
        alone = timed_calls({"ours": call}, args.rounds, "interleaved")["ours"]
        with busy_python_thread():
            busy = timed_calls({"ours": call}, args.rounds, "interleaved")["ours"]
        print(f"| {label} | {statistics.median(alone) * 1e3:.1f} | "
              f"{statistics.median(busy) * 1e3:.1f} |", flush=True)
    return 1 if failed else 0


def kimi_workloads() -> list[tuple[str, Callable[[], Any]]]:
    """(label, call): requests of several frames, which run in one job loop."""
    import numpy as np

    from vlm_fastpath.bench.checkpoints import KIMI_K25_MEDIA_CFG
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    kimi = FusedKimiProcessor(KIMI_K25_MEDIA_CFG)
    images = [photo_like(3 + i, 1024, 768) for i in range(8)]
    photos = [photo_like(3 + i, 4032, 3024) for i in range(3)]
    frames = [np.asarray(photo_like(3 + i, 1280, 720)) for i in range(16)]

    def request(medias: list[dict[str, Any]]) -> Callable[[], Any]:
        return lambda: kimi.preprocess(medias)["pixel_values"]

    return [
        ("8 images 1024x768 PIL", request([{"type": "image", "image": i} for i in images])),
        ("3 photos 4032x3024 PIL, many blocks",
         request([{"type": "image", "image": i} for i in photos])),
        ("video chunk 16x1280x720 arrays",
         request([{"type": "video_chunk", "video_chunk": frames}])),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
