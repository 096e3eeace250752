"""Qwen-VL video preprocessing: ours vs transformers' video processor, side by side.

Run in an environment with transformers + torchvision (e.g. ``.envs/vllm-0.33.0``):

    python -m benchmarks.qwen_video [--rounds 5] [--clips 32x1280x720,...] [--models ...]

Contenders: transformers' ``Qwen2VLVideoProcessor`` (Qwen2/2.5-VL; class defaults, as a
Qwen2.5-VL checkpoint without a video config gets them) and, with ``--models qwen3-vl``,
``Qwen3VLVideoProcessor`` (Qwen3-VL's published video config), each against our twin
(``fast_video_processor``). Input: decoded uint8 frames as the engines hand them over, one
``[T, H, W, 3]`` numpy clip of photo-like frames that drift. Every output of ours is checked
with ``torch.equal`` against transformers' before any timing (and the run fails if not).
Timing: a warm-up call each, then rounds in one or both schedules (``--schedule``, default
both: ``interleaved`` alternates the order, ``blocks`` settles each contender and times three
calls in a row; why both: ``benchmarks.schedules``); medians (and minimums).
Peak extra memory: RSS growth during one call, sampled from /proc, against the output's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from benchmarks.memory import measure_peak
from benchmarks.qwen_preprocess import environment
from benchmarks.schedules import SCHEDULES, timed_calls

CLIPS: dict[str, tuple[int, int, int]] = {  # name -> (frames, width, height)
    "32x1280x720": (32, 1280, 720),
    "64x1920x1080": (64, 1920, 1080),
    "16x3840x2160": (16, 3840, 2160),
}
QWEN3_VL_VIDEO = {"size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16,
                  "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                  "image_std": [0.5, 0.5, 0.5]}
UINT8 = {"do_rescale": False, "do_normalize": False}
TARGET = 8.0  # issue #29: at least 8x transformers on every clip


@dataclass
class Row:
    model: str
    clip: str
    dtype: str
    schedule: str
    hf_median_ms: float
    ours_median_ms: float
    hf_min_ms: float
    ours_min_ms: float
    speedup: float
    ours_peak_extra_mb: float
    hf_peak_extra_mb: float
    output_mb: float
    exact: bool


def photo_clip(frames: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """Smooth random pixels plus fine noise (resize work like a photograph's), panning a few
    pixels per frame so no two frames are equal."""
    rng = np.random.default_rng(seed)
    pan = 4 * frames
    small = rng.integers(0, 256, size=(max(2, height // 32), max(2, (width + pan) // 32), 3))
    base = np.asarray(Image.fromarray(small.astype(np.uint8)).resize((width + pan, height),
                                                                     Image.BICUBIC))
    noise = rng.integers(-8, 9, size=(height, width + pan, 3), dtype=np.int16)
    wide = np.clip(base.astype(np.int16) + noise, 0, 255).astype(np.uint8)
    return np.stack([wide[:, 4 * k:4 * k + width] for k in range(frames)])


def processors(model: str) -> tuple[Any, Any]:
    """(transformers' video processor, ours) for ``model``."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from vlm_fastpath.qwen_integration.video_processor import fast_video_processor

    hf = Qwen2VLVideoProcessor() if model == "qwen2.5-vl" else Qwen3VLVideoProcessor(
        **QWEN3_VL_VIDEO)
    return hf, fast_video_processor(hf)


def _same(a: Any, b: Any) -> bool:
    return all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k])
        for k in ("pixel_values_videos", "video_grid_thw")
    )


def _fresh_peak(fn: Callable[[], Any]) -> int:
    """Peak RSS growth of one call with the output pool off and emptied: a recycled output
    is memory the process already holds, which would hide the output itself."""
    from vlm_fastpath.imaging.output_pool import POOL

    key = "VLM_FASTPATH_BUFFER_POOL_MB"
    saved = os.environ.get(key)
    os.environ[key] = "0"
    try:
        gc.collect()
        POOL.idle_bytes()  # trims the idle slabs to the limit: none
        return measure_peak(fn)[2]
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


def bench_clip(model: str, name: str, dtype: str, rounds: int,
               schedules: tuple[str, ...] = SCHEDULES) -> list[Row]:
    """One row per schedule; the outputs checked and the peaks measured once."""
    frames, width, height = CLIPS[name]
    clip = photo_clip(frames, width, height)
    hf, ours = processors(model)
    kwargs: dict[str, Any] = {"do_sample_frames": False, "return_tensors": "pt"}
    if dtype == "uint8":
        kwargs.update(UINT8)
    fns: dict[str, Callable[[], Any]] = {"hf": lambda: hf(clip, **kwargs),
                                         "ours": lambda: ours(clip, **kwargs)}
    expected, got = fns["hf"](), fns["ours"]()  # also the warm-up
    exact = _same(expected, got)
    values = got["pixel_values_videos"]
    out_mb = values.numel() * values.element_size() / 2**20
    del expected, got, values
    peaks = {n: _fresh_peak(fn) / 2**20 for n, fn in fns.items()}
    rows = []
    for schedule in schedules:
        times = timed_calls(fns, rounds, schedule)
        med = {n: statistics.median(v) * 1000 for n, v in times.items()}
        rows.append(Row(model, name, dtype, schedule, med["hf"], med["ours"],
                        min(times["hf"]) * 1000, min(times["ours"]) * 1000,
                        med["hf"] / med["ours"], peaks["ours"], peaks["hf"], out_mb, exact))
    return rows


def format_table(rows: list[Row]) -> str:
    head = (f"{'model':<11} {'clip':<13} {'dtype':<7} {'schedule':<11} {'HF ms':>8} {'ours ms':>8} "
            f"{'HF min':>8} {'ours min':>8} {'x HF':>6} {'target':>6} {'peak MB':>8} "
            f"{'x out':>6} {'exact':>6}")
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(
            f"{row.model:<11} {row.clip:<13} {row.dtype:<7} {row.schedule:<11} "
            f"{row.hf_median_ms:8.0f} "
            f"{row.ours_median_ms:8.0f} {row.hf_min_ms:8.0f} {row.ours_min_ms:8.0f} "
            f"{row.speedup:6.2f} {'met' if row.speedup >= TARGET else 'NOT':>6} "
            f"{row.ours_peak_extra_mb:8.0f} "
            f"{row.ours_peak_extra_mb / max(row.output_mb, 1e-9):6.2f} "
            f"{'yes' if row.exact else 'NO':>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clips", default=",".join(CLIPS))
    parser.add_argument("--dtypes", default="float32,uint8")
    parser.add_argument("--models", default="qwen2.5-vl")
    parser.add_argument("--schedule", choices=(*SCHEDULES, "both"), default="both",
                        help="how the contenders' calls alternate (benchmarks.schedules)")
    parser.add_argument("--json", type=Path, default=None, help="also write rows + env here")
    args = parser.parse_args(argv)
    schedules = SCHEDULES if args.schedule == "both" else (args.schedule,)
    warnings.simplefilter("ignore")
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    rows: list[Row] = []
    for model in args.models.split(","):
        for clip in args.clips.split(","):
            for dtype in args.dtypes.split(","):
                rows.extend(bench_clip(model, clip, dtype, args.rounds, schedules))
                print(f"done {model} {clip} {dtype}", file=sys.stderr, flush=True)
    env = environment()
    print(f"# {json.dumps(env)}")
    print(format_table(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env, "rows": [asdict(r) for r in rows]}, indent=1))
    if not all(row.exact for row in rows):
        print("NOT EXACT: see the 'exact' column", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
