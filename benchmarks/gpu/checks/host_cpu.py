"""The CPU kernels on the GPU machine's own processor: still exact there, and how fast.

Why: numba compiles our image kernels (the LLVM 8x8 byte transposes, the 64-byte vector
copies, the int16 tap sweeps, the video kernel) for the CPU it runs on. Every test so far ran
on one kind of 2-core box (AMD Zen 4); a GPU server's CPU may be another make (other machine
code) and has many cores (other band splits, more threads). Claims: the parity tests pass
there (``torch.equal`` against Pillow and the installed transformers), and the figures of the
Qwen-VL image and video benchmarks on its cores, side by side with transformers in one run
(each benchmark fails if a row is not exact).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._result import StepContext, StepResult

ROOT = Path(__file__).resolve().parents[3]
# Bit-exact tests of the numba kernels against numpy, Pillow and transformers (149 tests, 141 s
# cold on a 2-core box, numba's compiles included).
PARITY_FILES = (
    "tests/test_numba_steps.py",
    "tests/kimi_integration/test_pillow_pixels.py",
    "tests/kimi_integration/test_resample.py",
    "tests/qwen_integration/test_video_parity.py",
    "tests/qwen_integration/test_uint8_fast_paths.py",
)
QUICK_SELECTION = ("tests/test_numba_steps.py", "-k", "transpose8")
FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vbmi", "amx_tile")
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def host_facts() -> dict[str, Any]:
    """The processor numba compiles for, its cores, and the libraries the parity depends on."""
    facts: dict[str, Any] = {"cpu_count": os.cpu_count(),
                             "usable_cores": len(os.sched_getaffinity(0))}
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        facts["model"] = model.group(1).strip() if model else "?"
        present = set(flags.group(1).split()) if flags else set()
        facts["flags"] = [f for f in FLAGS if f in present]
    except OSError as exc:
        facts["cpuinfo"] = f"unreadable ({exc})"
    for name in ("numba", "llvmlite", "PIL", "transformers", "torchvision", "numpy"):
        try:
            facts[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001 - reported
            facts[name] = f"not importable ({type(exc).__name__})"
    try:
        import llvmlite.binding as llvm

        facts["llvm_host_cpu"] = llvm.get_host_cpu_name()
    except Exception as exc:  # noqa: BLE001
        facts["llvm_host_cpu"] = f"unknown ({type(exc).__name__})"
    facts["VLM_FASTPATH_RESIZE_THREADS"] = os.environ.get("VLM_FASTPATH_RESIZE_THREADS", "")
    return facts


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def pytest_counts(output: str) -> dict[str, int]:
    """pytest's closing line ("3 passed, 1 skipped in 2.0s") as counts."""
    lines = [ln for ln in output.splitlines() if " in " in ln and SUMMARY.search(ln)]
    counts: dict[str, int] = {}
    for number, word in SUMMARY.findall(lines[-1] if lines else ""):
        counts["errors" if word.startswith("error") else word] = int(number)
    return counts


def run_parity(ctx: StepContext, result: StepResult, timeout: float) -> None:
    selection = PARITY_FILES if ctx.cuda and not ctx.quick else QUICK_SELECTION
    # -rfE: the failures are named in the closing summary, which the note's tail keeps (the H200
    # run's tail was transformers' log lines, and naming the failures took another device call)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
           "--tb=line", "--show-capture=no", *selection]
    if selection is PARITY_FILES and importlib.util.find_spec("xdist") is not None:
        # one worker per file: numba's compiles (most of the ~140 s on a 2-core box) in parallel
        cmd += ["-n", str(min(len(PARITY_FILES), max(1, (os.cpu_count() or 1) // 2))),
                "--dist", "loadfile"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                              timeout=timeout)
        output, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        rc = None
    seconds = round(time.perf_counter() - start, 1)
    counts = pytest_counts(output)
    ok = rc == 0 and counts.get("passed", 0) > 0 and not counts.get("failed")
    if ctx.wrong():
        ok = False
    result.check("parity tests on this host's CPU (numba compiled for it)", ok,
                 files=list(selection), counts=counts, seconds=seconds,
                 rc="timeout" if rc is None else rc)
    if not ok:
        result.note("parity output tail:\n" + "\n".join(output.splitlines()[-40:]))


def run_bench(result: StepResult, key: str, module: str, args: list[str], timeout: float) -> None:
    """One side-by-side benchmark on this host; its rows (each checked exact) as a measurement."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, "-m", module, *args, "--json", str(out)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            result.skip(f"{key} figures", f"past the {timeout:.0f} s left in this step's budget")
            return
        if not out.exists():
            result.check(f"{key}: benchmark ran", False, rc=proc.returncode,
                         tail=(proc.stdout + proc.stderr)[-1500:])
            return
        rows = json.loads(out.read_text())["rows"]
    result.check(f"{key}: every row torch.equal transformers", proc.returncode == 0
                 and all(r.get("exact", True) for r in rows), rows=len(rows))
    keep = ("model", "clip", "workload", "dtype", "contender", "hf_median_ms", "ours_median_ms",
            "median_ms", "speedup", "speedup_vs_same_hf", "speedup_vs_faster_hf")
    result.measure(key, [{k: r[k] for k in keep if k in r} for r in rows])
    print(proc.stdout[-3000:], flush=True)


def run(ctx: StepContext, result: StepResult) -> None:
    start = time.perf_counter()
    budget = ctx.budget_s or 240.0
    facts = host_facts()
    result.measure("host", facts)
    print(f"  host: {facts}", flush=True)
    run_parity(ctx, result, timeout=budget * 0.7 if ctx.cuda else budget)
    if not ctx.cuda or ctx.quick:
        result.skip("16-core side-by-side figures", "taken on the GPU machine only")
        return
    left = lambda: budget - 5 - (time.perf_counter() - start)  # noqa: E731
    run_bench(result, "qwen_video", "benchmarks.qwen_video",
              ["--rounds", "3", "--clips", "32x1280x720,64x1920x1080,16x3840x2160"],
              timeout=max(1.0, left() * 0.7))
    run_bench(result, "qwen_image_2048", "benchmarks.qwen_preprocess",
              ["--rounds", "5", "--workloads", "2048x2048"], timeout=max(1.0, left()))
