"""Qwen-VL image preprocessing: ours vs the two transformers processors, side by side.

Run in an environment with transformers + torchvision (e.g. ``.envs/vllm-0.33.0``):

    python -m benchmarks.qwen_preprocess [--rounds 15] [--workloads 2048x2048,...] [--json F]

Contenders: transformers' ``Qwen2VLImageProcessor`` (torchvision), ``Qwen2VLImageProcessorPil``
and ours mirrored from each (``from_hf``). Every contender's output is checked with
``torch.equal`` against its reference (the HF processor of the same arithmetic) before any
timing. Timing: warm-up calls, then rounds that rotate the contender order; medians. Peak
extra memory: RSS growth during one call (output included), sampled from /proc.

Two schedules (``--schedule``, default both): ``interleaved`` and ``blocks``, and why both:
``benchmarks.schedules``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from benchmarks.schedules import SCHEDULES, timed_calls

WORKLOADS: dict[str, tuple[int, int, int]] = {  # name -> (count, width, height)
    "1024x1024": (1, 1024, 1024),
    "2048x2048": (1, 2048, 2048),
    "4032x3024": (1, 4032, 3024),
    "8x1280x960": (8, 1280, 960),
}
QWEN25_VL = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
             "temporal_patch_size": 2, "merge_size": 2}
UINT8 = {"do_rescale": False, "do_normalize": False}


@dataclass
class Row:
    workload: str
    dtype: str
    schedule: str
    contender: str
    median_ms: float
    min_ms: float
    speedup_vs_same_hf: float
    speedup_vs_faster_hf: float
    peak_extra_mb: float
    output_mb: float
    exact: bool


def photo_like(seed: int, width: int, height: int) -> Image.Image:
    """Smooth random pixels plus fine noise: resize work like a photograph's, never constant."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 32), max(2, width // 32), 3))
    base = Image.fromarray(small.astype(np.uint8)).resize((width, height), Image.BICUBIC)
    noise = rng.integers(-8, 9, size=(height, width, 3))
    return Image.fromarray(np.clip(np.asarray(base, dtype=np.int16) + noise, 0, 255)
                           .astype(np.uint8))


def contenders() -> dict[str, tuple[Callable[..., Any], str]]:
    """name -> (callable(images, **kwargs), name of its reference)."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLImageProcessorPil

    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, check_compatible

    hf_tv = Qwen2VLImageProcessor(**QWEN25_VL)
    hf_pil = Qwen2VLImageProcessorPil(**QWEN25_VL)
    for hf in (hf_tv, hf_pil):
        reason = check_compatible(hf)
        if reason:
            raise SystemExit(f"our processor stands aside for {type(hf).__name__}: {reason}")
    ours_tv = FastQwen2VLImageProcessor.from_hf(hf_tv)
    ours_pil = FastQwen2VLImageProcessor.from_hf(hf_pil)

    def call(proc: Any) -> Callable[..., Any]:
        return lambda images, **kw: proc(images=images, return_tensors="pt", **kw)

    return {
        "hf-torchvision": (call(hf_tv), "hf-torchvision"),
        "hf-pil": (call(hf_pil), "hf-pil"),
        "ours-torchvision": (call(ours_tv), "hf-torchvision"),
        "ours-pil": (call(ours_pil), "hf-pil"),
    }


def _same(a: Any, b: Any) -> bool:
    return all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k])
        for k in ("pixel_values", "image_grid_thw")
    )


def bench_workload(
    name: str, dtype: str, fns: dict[str, tuple[Callable[..., Any], str]], rounds: int,
    schedule: str = "interleaved",
) -> list[Row]:
    count, width, height = WORKLOADS[name]
    images = [photo_like(i + width, width, height) for i in range(count)]
    kwargs = UINT8 if dtype == "uint8" else {}
    outputs = {n: fn(images, **kwargs) for n, (fn, _) in fns.items()}  # also the warm-up
    exact = {n: _same(outputs[n], outputs[ref]) for n, (_, ref) in fns.items()}
    out_mb = {n: outputs[n]["pixel_values"].numel() * outputs[n]["pixel_values"].element_size()
              / 2**20 for n in fns}
    del outputs
    for fn, _ in fns.values():  # second warm-up call each
        fn(images, **kwargs)
    times = timed_calls({n: (lambda fn=fn: fn(images, **kwargs)) for n, (fn, _) in fns.items()},
                        rounds, schedule)
    peaks = {}
    for n, (fn, _) in fns.items():
        _, _, peak = measure_peak(lambda fn=fn: fn(images, **kwargs))
        peaks[n] = peak / 2**20
    med = {n: statistics.median(v) * 1000 for n, v in times.items()}
    faster_hf = min(med["hf-torchvision"], med["hf-pil"])
    return [
        Row(name, dtype, schedule, n, med[n], min(times[n]) * 1000, med[ref] / med[n],
            faster_hf / med[n], peaks[n], out_mb[n], exact[n])
        for n, (_, ref) in fns.items()
    ]


def format_table(rows: list[Row]) -> str:
    head = (f"{'workload':<12} {'dtype':<7} {'schedule':<11} {'contender':<17} {'median ms':>9} "
            f"{'min ms':>8} "
            f"{'x same-HF':>9} {'x faster-HF':>11} {'peak MB':>8} {'x out':>6} {'exact':>6}")
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(
            f"{row.workload:<12} {row.dtype:<7} {row.schedule:<11} {row.contender:<17} "
            f"{row.median_ms:9.1f} "
            f"{row.min_ms:8.1f} {row.speedup_vs_same_hf:9.2f} {row.speedup_vs_faster_hf:11.2f} "
            f"{row.peak_extra_mb:8.0f} {row.peak_extra_mb / max(row.output_mb, 1e-9):6.2f} "
            f"{'yes' if row.exact else 'NO':>6}"
        )
    return "\n".join(lines)


def format_dtype_ratios(rows: list[Row]) -> str:
    """uint8 (vLLM's device-normalize default) against float32, per workload and contender:
    uint8 writes a quarter of the bytes, so it should never be the slower one."""
    med = {(r.workload, r.dtype, r.schedule, r.contender): r.median_ms for r in rows}
    lines = [f"{'workload':<12} {'schedule':<11} {'contender':<17} {'uint8/float32 ms':>16}"]
    for (workload, dtype, schedule, contender), ms in med.items():
        f32 = med.get((workload, "float32", schedule, contender))
        if dtype == "uint8" and f32:
            lines.append(f"{workload:<12} {schedule:<11} {contender:<17} {ms / f32:16.2f}")
    return "\n".join(lines) if len(lines) > 1 else ""


def environment() -> dict[str, Any]:
    import PIL
    import transformers

    from vlm_fastpath.qwen_integration import patchify_kernel

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "pillow": PIL.__version__,
        "kernel": patchify_kernel.backend_info(),
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    try:
        import torchvision

        info["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 15: at 1024² a call takes a few ms and medians of 7 rounds ranged 2.1-4.2x in one day
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--dtypes", default="float32,uint8")
    parser.add_argument("--schedule", choices=(*SCHEDULES, "both"), default="both",
                        help="how the contenders' calls alternate (benchmarks.schedules)")
    parser.add_argument("--json", type=Path, default=None, help="also write rows + env here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)
    fns = contenders()
    schedules = SCHEDULES if args.schedule == "both" else (args.schedule,)
    rows: list[Row] = []
    for workload in args.workloads.split(","):
        for dtype in args.dtypes.split(","):
            for schedule in schedules:
                rows.extend(bench_workload(workload, dtype, fns, args.rounds, schedule))
                print(f"done {workload} {dtype} {schedule}", file=sys.stderr, flush=True)
    env = environment()
    print(f"# {json.dumps(env)}")
    print(format_table(rows))
    ratios = format_dtype_ratios(rows)
    if ratios:
        print(ratios)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env, "rows": [asdict(r) for r in rows]}, indent=1))
    ok = all(row.exact for row in rows)
    if not ok:
        print("NOT EXACT: see the 'exact' column", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
