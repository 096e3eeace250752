"""The main benchmark: Kimi K2.5 image preprocessing, side by side in one process.

Contenders (each timed on the same fresh images, rounds interleaved, median after warm-up):
- reference: the checkpoint's plain arithmetic (tests/kimi_integration/reference_kimi.py);
- vllm-fused: vLLM's KimiK25FusedVisionProcessor, when vLLM is importable here;
- vlm-fastpath: our FusedKimiProcessor;
- floor: Pillow resize of the same batch on all cores + one write of an output-sized tensor,
  the least any bit-exact processor must do.
Every contender's output is checked against the reference before timing (bit-exact).

Run: ``make bench`` or ``python -m benchmarks.preprocess [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from benchmarks.memory import measure_peak
from benchmarks.workloads import Workload, default_workloads
from tests.kimi_integration.reference_kimi import KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.kimi_integration.patchify_kernel import backend_info
from vlm_fastpath.kimi_integration.resize_pool import available_cpus

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    workload: str
    contender: str
    median_ms: float
    images_per_s: float
    peak_extra_mb: float
    output_mb: float
    runs_ms: list[float] = field(default_factory=list)
    bit_exact: bool | None = None


def _reference(medias: list[dict]) -> torch.Tensor:
    return ref_preprocess(medias, KIMI_K25_CFG)[0]


def _ours() -> Callable[[list[dict]], torch.Tensor]:
    processor = FusedKimiProcessor(KIMI_K25_CFG)
    return lambda medias: processor.preprocess(medias)["pixel_values"]


def _vllm_fused() -> Callable[[list[dict]], torch.Tensor] | None:
    try:
        from vllm.transformers_utils.processors.kimi_k25_vision_fused import (
            KimiK25FusedVisionProcessor,
        )
        from vllm.utils.import_utils import is_numba_available
    except Exception:  # noqa: BLE001 - vLLM absent or too old: no row
        return None
    if not is_numba_available():
        return None
    processor = KimiK25FusedVisionProcessor(dict(KIMI_K25_CFG))
    # vLLM's processor mutates the media dicts (converts in place): give it copies.
    return lambda medias: processor.preprocess([dict(m) for m in medias])["pixel_values"]


def _floor() -> Callable[[list[dict]], torch.Tensor]:
    processor = FusedKimiProcessor(KIMI_K25_CFG)
    pool = ThreadPoolExecutor(max_workers=available_cpus())

    def run(medias: list[dict]) -> torch.Tensor:
        plans = [processor.plan(m) for m in medias]
        jobs = [
            pool.submit(m["image"].resize, (p.new_width, p.new_height), Image.Resampling.BICUBIC)
            for m, p in zip(medias, plans, strict=True)
        ]
        for job in jobs:
            job.result()
        out = np.empty((sum(p.num_patches for p in plans), 3, 14, 14), dtype=np.float32)
        out.fill(0.5)  # numpy, not torch: torch's OpenMP threads spin after a parallel region
        return torch.from_numpy(out)

    return run


def contenders() -> dict[str, Callable[[list[dict]], torch.Tensor]]:
    found: dict[str, Callable[[list[dict]], torch.Tensor]] = {"reference": _reference}
    vllm_fn = _vllm_fused()
    if vllm_fn is not None:
        found["vllm-fused"] = vllm_fn
    found["vlm-fastpath"] = _ours()
    found["floor"] = _floor()
    return found


def _progress(total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, leave=False, file=sys.stderr)
    except ImportError:  # pragma: no cover
        return None


def bench_workload(
    workload: Workload, fns: dict[str, Callable[[list[dict]], torch.Tensor]], repeats: int
) -> list[Row]:
    medias = workload.medias
    expected = _reference(medias)
    output_mb = expected.numel() * expected.element_size() / 2**20
    exact: dict[str, bool | None] = {}
    for name, fn in fns.items():  # warm-up (numba compile, pools) + correctness check
        got = fn(medias)
        exact[name] = None if name == "floor" else bool(torch.equal(got, expected))
        del got
    del expected
    times: dict[str, list[float]] = {name: [] for name in fns}
    peaks: dict[str, int] = {name: 0 for name in fns}
    bar = _progress(repeats * len(fns), workload.name)
    names = list(fns)
    for round_ in range(repeats):
        # Rotate the order each round so no contender always runs right after another.
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            gc.collect()
            result, seconds, peak = measure_peak(lambda fn=fn: fn(medias))
            del result
            times[name].append(seconds * 1000)
            peaks[name] = max(peaks[name], peak)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    rows = []
    for name in fns:
        median = statistics.median(times[name])
        rows.append(
            Row(
                workload.name,
                name,
                median,
                len(medias) / (median / 1000),
                peaks[name] / 2**20,
                output_mb,
                [round(t, 1) for t in times[name]],
                exact[name],
            )
        )
    return rows


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'workload':<14} {'contender':<13} {'median ms':>10} {'img/s':>7} {'vs ref':>7} "
        f"{'vs vLLM':>8} {'/ floor':>8} {'peak MB':>8} {'x out':>6} {'exact':>6}"
    )
    lines = [header, "-" * len(header)]
    by_workload: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_workload.setdefault(row.workload, {})[row.contender] = row
    for workload, group in by_workload.items():
        ref = group["reference"].median_ms
        vllm = group.get("vllm-fused")
        floor = group["floor"].median_ms
        for row in group.values():
            vs_vllm = f"{vllm.median_ms / row.median_ms:7.2f}x" if vllm else f"{'-':>8}"
            exact = "-" if row.bit_exact is None else ("yes" if row.bit_exact else "NO")
            lines.append(
                f"{workload:<14} {row.contender:<13} {row.median_ms:10.1f} "
                f"{row.images_per_s:7.2f} {ref / row.median_ms:6.2f}x {vs_vllm} "
                f"{row.median_ms / floor:7.2f}x {row.peak_extra_mb:8.0f} "
                f"{row.peak_extra_mb / row.output_mb:6.2f} {exact:>6}"
            )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    workloads = list(dict.fromkeys(r.workload for r in rows))
    names = list(dict.fromkeys(r.contender for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [
            next((r.median_ms for r in rows if r.workload == w and r.contender == name), 0.0)
            for w in workloads
        ]
        xs = np.arange(len(workloads)) + i * width
        bars = ax.bar(xs, values, width, label=name)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(np.arange(len(workloads)) + width * (len(names) - 1) / 2, workloads)
    ax.set_ylabel("median ms (lower is better)")
    ax.set_title(f"Kimi K2.5 preprocessing, {available_cpus()} cores")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cores": available_cpus(),
        "torch": torch.__version__,
        "pillow": Image.__version__,
        "numpy": np.__version__,
        "kernel": backend_info(),
    }
    try:
        import vllm

        info["vllm"] = vllm.__version__
    except Exception:  # noqa: BLE001
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=8, help="timed rounds per contender")
    parser.add_argument("--quick", action="store_true", help="one small workload (smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for PNG/JSON results")
    args = parser.parse_args(argv)
    fns = contenders()
    env = environment()
    print("environment:", json.dumps(env))
    rows: list[Row] = []
    for workload in default_workloads(quick=args.quick):
        rows.extend(bench_workload(workload, fns, args.repeats))
    print(format_table(rows))
    tag = "quick" if args.quick else "preprocess"
    suffix = f"-vllm{env['vllm']}" if "vllm" in env else ""
    png = plot(rows, args.out / f"{tag}{suffix}.png")
    (args.out / f"{tag}{suffix}.json").write_text(
        json.dumps({"environment": env, "rows": [asdict(r) for r in rows]}, indent=2)
    )
    if png:
        print(f"chart: {os.path.relpath(png)}")
    failures = [r for r in rows if r.bit_exact is False and r.contender == "vlm-fastpath"]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
