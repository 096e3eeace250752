"""The main benchmark: Kimi K2.5 image preprocessing, side by side in one process.

Contenders (each timed on the same fresh images, rounds interleaved, median after warm-up):
- reference: the checkpoint's plain arithmetic (fixtures/reference_kimi.py);
- vllm-fused: vLLM's KimiK25FusedVisionProcessor, when vLLM is importable here;
- vlm-fastpath: our FusedKimiProcessor;
- pillow-1thr / pillow-all: Pillow's bicubic resize alone (no pad/normalize/patchify), on one
  thread and on all cores: what a processor that calls Pillow cannot beat;
- floor: Pillow resize of the same batch on all cores + one write of an output-sized tensor.
Every contender's output is checked against the reference before timing (bit-exact).
Workloads with ``threads > 1`` are timed as that many Python threads calling at once.
Peak extra memory (RSS growth, sampled every millisecond) comes from separate, untimed
rounds, so the sampler thread never competes with a timed call for the cores.

Then, in fresh subprocesses (``--first-calls``): the median of the first 16 calls of a
process on 1x2048x2048 and the first call's cost (numba import + kernel cache load or
compile), with numba's cache warm and cold (an empty ``NUMBA_CACHE_DIR``).

Run: ``make bench`` or ``python -m benchmarks.preprocess [--quick] [--repeats N]``; it runs
without vLLM too (no vllm-fused row then).

Output: the chart and JSON go to ``benchmarks/results/local/``, a folder git ignores (it holds
its own ``.gitignore``), so a run leaves the checkout clean. ``--record`` (or
``VLM_FASTPATH_BENCH_RECORD=1 make bench``) writes them to ``benchmarks/results/`` instead,
replacing the tracked chart: only for a run meant to become the published figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
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
from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.imaging.resample import resampler_info
from vlm_fastpath.imaging.resize_pool import available_cpus, default_workers
from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.kimi_integration.patchify_kernel import backend_info

RESULTS = Path(__file__).resolve().parent / "results"  # the tracked, published figures
# Where an ordinary run writes: ignored by git, so `make bench` never dirties the checkout.
LOCAL_RESULTS = RESULTS / "local"
RECORD_ENV = "VLM_FASTPATH_BENCH_RECORD"


def recording_by_default() -> bool:
    """``VLM_FASTPATH_BENCH_RECORD=1`` asks ``make bench`` (no flags there) to record."""
    return os.environ.get(RECORD_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def output_folder(out: Path | None, record: bool) -> Path:
    """Where a run writes its chart and JSON: ``out`` when given, the tracked ``RESULTS``
    when recording, else ``LOCAL_RESULTS``, created with a ``.gitignore`` that ignores the
    folder itself (nothing to commit, and untracked files never show in ``git status``)."""
    if out is not None:
        return out
    if record:
        return RESULTS
    LOCAL_RESULTS.mkdir(parents=True, exist_ok=True)
    ignore = LOCAL_RESULTS / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# local `make bench` output (benchmarks/preprocess.py); "
                          "--record writes the tracked figures\n*\n")
    return LOCAL_RESULTS


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
    cpu_ms: float = 0.0  # median CPU time of all the process's threads during a call


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


def _pillow_alone(workers: int) -> Callable[[list[dict]], torch.Tensor]:
    """Pillow's resize of every image and nothing else, on ``workers`` threads."""
    processor = FusedKimiProcessor(KIMI_K25_CFG)
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None

    def resize(media: dict) -> Image.Image:
        plan = processor.plan(media)
        return media["image"].resize((plan.new_width, plan.new_height), Image.Resampling.BICUBIC)

    def run(medias: list[dict]) -> torch.Tensor:
        if pool is None:
            for media in medias:
                resize(media)
        else:
            list(pool.map(resize, medias))
        return torch.empty(0)

    return run


# Peak memory is sampled in rounds of its own after the timed ones: the sampler thread wakes
# every millisecond, and on 2 cores it took a core from the timed call (same process: ours
# 1x2048² 13.8 ms unsampled vs 19.8 sampled, 8x2048² 92 vs 125 ms).
MEMORY_ROUNDS = 2

NOT_CHECKED = frozenset({"floor", "pillow-1thr", "pillow-all"})  # no pixel_values to compare
# vLLM's fused processor launches numba parallel=True kernels on the workqueue layer, which
# aborts the whole process when two Python threads enter it at once: no concurrent rows.
NOT_THREAD_SAFE = frozenset({"vllm-fused"})


def contenders() -> dict[str, Callable[[list[dict]], torch.Tensor]]:
    found: dict[str, Callable[[list[dict]], torch.Tensor]] = {"reference": _reference}
    vllm_fn = _vllm_fused()
    if vllm_fn is not None:
        found["vllm-fused"] = vllm_fn
    found["vlm-fastpath"] = _ours()
    found["pillow-1thr"] = _pillow_alone(1)
    found["pillow-all"] = _pillow_alone(available_cpus())
    found["floor"] = _floor()
    return found


def _concurrent(fn: Callable[[list[dict]], torch.Tensor], batches: list[list[dict]],
                callers: ThreadPoolExecutor) -> list[torch.Tensor]:
    """Each batch from its own Python thread, all at once (a server's request threads)."""
    return list(callers.map(fn, batches))


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
    batches = workload.per_thread
    callers = ThreadPoolExecutor(max_workers=workload.threads) if workload.threads > 1 else None
    if callers is not None:
        fns = {
            name: (lambda _m, fn=fn: _concurrent(fn, batches, callers))
            for name, fn in fns.items()
            if name not in NOT_THREAD_SAFE
        }
        expected_parts = [_reference(batch) for batch in batches]
    else:
        expected_parts = [_reference(medias)]
    output_mb = sum(e.numel() * e.element_size() for e in expected_parts) / 2**20
    exact: dict[str, bool | None] = {}
    for name, fn in fns.items():  # warm-up (numba compile, pools) + correctness check
        got = fn(medias)
        got_parts = got if callers is not None else [got]
        exact[name] = None if name in NOT_CHECKED else all(
            torch.equal(g, e) for g, e in zip(got_parts, expected_parts, strict=True)
        )
        del got, got_parts
    del expected_parts
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    peaks: dict[str, int] = {name: 0 for name in fns}
    bar = _progress(repeats * len(fns), workload.name)
    names = list(fns)
    for round_ in range(repeats + MEMORY_ROUNDS):
        # Rotate the order each round so no contender always runs right after another.
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            gc.collect()
            if round_ >= repeats:  # memory rounds: the RSS sampler runs, not timed
                result, _, peak = measure_peak(lambda fn=fn: fn(medias))
                del result
                peaks[name] = max(peaks[name], peak)
                continue
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            result = fn(medias)
            seconds = time.perf_counter() - t0
            cpu[name].append((time.process_time() - cpu0) * 1000)
            del result
            times[name].append(seconds * 1000)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    if callers is not None:
        callers.shutdown()
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
                statistics.median(cpu[name]),
            )
        )
    return rows


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'workload':<14} {'contender':<13} {'median ms':>10} {'img/s':>7} {'vs ref':>7} "
        f"{'vs vLLM':>8} {'/ floor':>8} {'/ PIL-all':>9} {'peak MB':>8} {'x out':>6} "
        f"{'cpu ms':>7} {'exact':>6}"
    )
    lines = [header, "-" * len(header)]
    by_workload: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_workload.setdefault(row.workload, {})[row.contender] = row
    for workload, group in by_workload.items():
        ref = group["reference"].median_ms
        vllm = group.get("vllm-fused")
        floor = group["floor"].median_ms
        pil_all = group["pillow-all"].median_ms
        for row in group.values():
            vs_vllm = f"{vllm.median_ms / row.median_ms:7.2f}x" if vllm else f"{'-':>8}"
            exact = "-" if row.bit_exact is None else ("yes" if row.bit_exact else "NO")
            lines.append(
                f"{workload:<14} {row.contender:<13} {row.median_ms:10.1f} "
                f"{row.images_per_s:7.2f} {ref / row.median_ms:6.2f}x {vs_vllm} "
                f"{row.median_ms / floor:7.2f}x {row.median_ms / pil_all:8.2f}x "
                f"{row.peak_extra_mb:8.0f} "
                f"{row.peak_extra_mb / row.output_mb:6.2f} {row.cpu_ms:7.1f} {exact:>6}"
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
        "resampler": resampler_info(),
        "threads": default_workers(),
    }
    try:
        import vllm

        info["vllm"] = vllm.__version__
    except Exception:  # noqa: BLE001
        pass
    return info


def concurrency_check(rows: list[Row], cores: int) -> str | None:
    """The issue's concurrency figure for our processor, with the work it stands for.

    "4 threads x 1x2048² within 1.2x of 4 x (single-call time) / cores" assumes one call
    runs on one core. Ours runs on all of them, so 4 x its wall time / cores is less than
    the CPU work of four calls can take on these cores; that work (4 x the CPU time of one
    call / cores) is printed beside it.
    """
    ours = {r.workload: r for r in rows if r.contender == "vlm-fastpath"}
    single, four = ours.get("1x2048x2048"), ours.get("4thr x 1x2048")
    if single is None or four is None:
        return None
    as_written = 1.2 * 4 * single.median_ms / cores
    work = 4 * single.cpu_ms / cores
    return (
        f"4 threads x 1x2048²: {four.median_ms:.1f} ms; 1.2 x 4 x single call "
        f"({single.median_ms:.1f} ms) / {cores} cores = {as_written:.1f} ms; the CPU work of "
        f"4 calls ({single.cpu_ms:.1f} ms CPU each) on {cores} cores = {work:.1f} ms "
        f"(x1.2 = {1.2 * work:.1f})"
    )


def first_calls(calls: int = 16) -> dict[str, float]:
    """In this (fresh) process: kernel load time, then ``calls`` calls on 1x2048x2048."""
    from benchmarks.workloads import random_images
    from vlm_fastpath.imaging import resample

    images = random_images(calls, 2048, 2048, seed=99)  # a new image per call, like a server
    # An engine process has transformers imported already (the output is its BatchFeature):
    # import it first, so no figure below includes it.
    t0 = time.perf_counter()
    try:
        import transformers  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
    transformers_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    resample.kernel_enabled()  # imports numba and the kernel module
    load_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    processor = FusedKimiProcessor(KIMI_K25_CFG)  # loads (or compiles) the kernel: warm_up()
    construct_ms = (time.perf_counter() - t0) * 1000
    times = []
    for image in images:
        t0 = time.perf_counter()
        processor.preprocess([{"type": "image", "image": image}])
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "transformers_import_ms": round(transformers_ms, 1),
        "numba_import_ms": round(load_ms, 1),
        "processor_construct_ms (kernel load or compile)": round(construct_ms, 1),
        "first_call_ms": round(times[0], 1),
        f"median_first_{calls}_ms": round(statistics.median(times), 1),
        f"median_calls_2_to_{calls}_ms": round(statistics.median(times[1:]), 1),
        "calls_ms": [round(t, 1) for t in times],
    }


def fresh_process_first_calls() -> dict[str, dict[str, float]]:
    """``first_calls`` in fresh subprocesses, numba's cache warm (as installed) and cold."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cold:
        for label, extra in (("cache-warm", {}), ("cache-cold", {"NUMBA_CACHE_DIR": cold})):
            env = dict(os.environ, **extra)
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.preprocess", "--first-calls"],
                env=env, capture_output=True, text=True, timeout=900,
                cwd=str(Path(__file__).resolve().parents[1]),
            )
            if proc.returncode != 0:
                results[label] = {"error": proc.stderr.strip()[-500:]}
                continue
            results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=8, help="timed rounds per contender")
    parser.add_argument("--quick", action="store_true", help="one small workload (smoke run)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for PNG/JSON results (default: benchmarks/results/local/, "
                             "ignored by git; with --record: benchmarks/results/)")
    parser.add_argument("--record", action="store_true", default=recording_by_default(),
                        help="write the tracked benchmarks/results/ chart (the published "
                             f"figures); also {RECORD_ENV}=1")
    parser.add_argument("--first-calls", action="store_true",
                        help="internal: time the first 16 calls of this process, print JSON")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-process runs")
    parser.add_argument("--workloads", default="", help="comma-separated workload names")
    args = parser.parse_args(argv)
    if args.first_calls:
        print(json.dumps(first_calls()))
        return 0
    out = output_folder(args.out, args.record)
    fresh = None if args.no_fresh or args.quick else fresh_process_first_calls()
    fns = contenders()
    env = environment()
    print("environment:", json.dumps(env))
    rows: list[Row] = []
    wanted = {name for name in args.workloads.split(",") if name}
    for workload in default_workloads(quick=args.quick):
        if not wanted or workload.name in wanted:
            rows.extend(bench_workload(workload, fns, args.repeats))
            print(format_table([r for r in rows if r.workload == workload.name]), flush=True)
    print("all workloads:")
    print(format_table(rows))
    concurrency = concurrency_check(rows, env["cores"])
    if concurrency:
        print(concurrency)
    if fresh is not None:
        print("fresh process, 1x2048x2048 (ms):")
        for label, figures in fresh.items():
            shown = {k: v for k, v in figures.items() if k != "calls_ms"}
            print(f"  {label}: {json.dumps(shown)}")
    tag = "quick" if args.quick else "preprocess"
    suffix = f"-vllm{env['vllm']}" if "vllm" in env else ""
    png = plot(rows, out / f"{tag}{suffix}.png")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{tag}{suffix}.json").write_text(
        json.dumps(
            {"environment": env, "rows": [asdict(r) for r in rows], "fresh_process": fresh},
            indent=2,
        )
    )
    if png:
        print(f"chart: {os.path.relpath(png)}")
    print(f"results: {os.path.relpath(out)}"
          + ("" if out != LOCAL_RESULTS else f" (not tracked; --record or {RECORD_ENV}=1 "
                                             "writes benchmarks/results/)"))
    failures = [r for r in rows if r.bit_exact is False and r.contender == "vlm-fastpath"]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
