"""Every CUDA-only claim of vlm-fastpath checked by one command on a lent GPU (< 10 min).

    python benchmarks/gpu/check_all.py [--device cuda|cpu] [--quick] [--out DIR] [--steps a,b]

Steps (``benchmarks/gpu/checks/<step>.py``), each in its own subprocess with its own time
budget, so a step that raises, hangs or kills its interpreter is reported and the others run:

- ``deferred``: the Pillow-exact torch resize vs Pillow (|diff| histogram) and the K2.5 owner
  path vs the eager CPU path (``torch.equal``), timed (``deferred_check.py``'s logic).
- ``h2d``: ``batched_move_to_device`` vs per-item copies for 1/4/8 Kimi- and Qwen-sized
  features: values after the caller overwrites/frees its host tensors and the pinned pool is
  reused while the copy is in flight, cudaMemcpyAsync calls (torch.profiler), wall time (CUDA
  events), and whether the call returns before the copy completes.
- ``syncs``: SGLang's real MoonViT, unpatched vs patched: device-to-host syncs per forward
  (``torch.cuda.set_sync_debug_mode("warn")``), outputs ``torch.equal``, forward time.
- ``ipc``: CUDA-IPC consumer counting and cache-hit release against the release's own pool and
  proxy, across spawned processes: 200 requests, every slot released exactly once, GPU memory
  back to its start.
- ``normalize``: uint8 -> float32 through the 256-entry table on the device equals the CPU
  result (``torch.equal``) for K2.5 (mean=std=0.5) and CLIP statistics.
- ``host_cpu``: the numba image kernels on the GPU machine's own CPU (other instruction sets,
  more cores): the parity tests pass there, and the Qwen-VL image and video benchmarks' figures
  on its cores, side by side with transformers.

``--device cpu`` is the dry run (``tests/test_gpu_check_dry_run.py``): every step runs its code
path, the CUDA-only measurements are reported as "skipped (needs CUDA)"; where SGLang is absent
``syncs`` reports "skipped" with the import error and ``ipc`` runs its stand-in proxy. Writes
``check_all.json`` and ``check_all.txt`` to ``--out`` (else ``$OUT``, else
``benchmarks/results/gpu``). Exit status 0 when no step failed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu.checks._result import StepContext, StepResult, StepSkipped  # noqa: E402

# name: (module, budget in seconds on CUDA, in the CPU dry run). Sum on CUDA: 560 s, from the
# H200 run of 2026-12-04 (deferred 29-40 s, h2d 19, syncs 62-71, ipc 50-69, normalize 15,
# host_cpu's parity 108+ s cold: numba compiles for that CPU); the CPU budgets allow for a
# loaded 2-core box importing SGLang in three processes.
STEPS: dict[str, tuple[str, int, int]] = {
    "deferred": ("benchmarks.gpu.checks.deferred", 60, 60),
    "h2d": ("benchmarks.gpu.checks.h2d", 40, 60),
    "syncs": ("benchmarks.gpu.checks.syncs", 100, 300),
    "ipc": ("benchmarks.gpu.checks.ipc", 90, 300),
    "normalize": ("benchmarks.gpu.checks.normalize", 30, 60),
    "host_cpu": ("benchmarks.gpu.checks.host_cpu", 240, 90),
}
NEEDS_SGLANG = ("syncs",)  # ipc falls back to a stand-in proxy without SGLang
CONTROLS = ("VLM_FASTPATH", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP")
INJECT_ENV = "VLM_FASTPATH_CHECK_INJECT"  # "step:raise|wrong|hang[,step:...]" (dry-run tests)


def _injections(spec: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, (spec or "").split(",")):
        step, _, mode = part.partition(":")
        if step not in STEPS or mode not in ("raise", "wrong", "hang"):
            raise SystemExit(f"bad injection {part!r}: expected STEP:raise|wrong|hang")
        out[step] = mode
    return out


def run_step_here(name: str, ctx: StepContext) -> dict[str, Any]:
    """Run one step in this process (the child side); never raises."""
    result = StepResult(name=name, device=ctx.device)
    print(f"== step {name} on {ctx.device}{' (quick)' if ctx.quick else ''}", flush=True)
    try:
        if ctx.inject == "raise":
            raise RuntimeError("injected failure (--inject)")
        if ctx.inject == "hang":
            time.sleep(10_000)
        if name in NEEDS_SGLANG:
            if importlib.util.find_spec("sglang") is None:  # skip before importing torch
                raise StepSkipped("sglang not importable: No module named 'sglang'")
        module = importlib.import_module(STEPS[name][0])
        module.run(ctx, result)
    except StepSkipped as exc:
        result.skip_reason = str(exc)
        print(f"  step skipped: {exc}", flush=True)
    except BaseException as exc:  # noqa: BLE001 - reported, never propagated
        result.error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    return result.to_json()


def _child(args: argparse.Namespace) -> int:
    ctx = StepContext(device=args.device, quick=args.quick, inject=args.inject_mode,
                      budget_s=args.budget_s)
    data = run_step_here(args.step, ctx)
    Path(args.result).write_text(json.dumps(data, indent=2, default=str))
    return 0


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_step_isolated(name: str, args: argparse.Namespace, inject: str | None,
                      workdir: Path) -> tuple[dict[str, Any], str]:
    """One step in a fresh interpreter under its time budget; its JSON and its output."""
    module, cuda_budget, cpu_budget = STEPS[name]
    budget = args.budgets.get(name, cuda_budget if args.device == "cuda" else cpu_budget)
    result_file = workdir / f"step-{name}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name,
           "--device", args.device, "--result", str(result_file), "--budget-s", str(budget)]
    if args.quick:
        cmd.append("--quick")
    if inject:
        cmd += ["--inject-mode", inject]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for control in CONTROLS:  # the steps apply and revert patches themselves
        env.pop(control, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    # Its own session, so a step past its budget is killed with every process it started.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=budget)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        rc = None
    seconds = round(time.perf_counter() - start, 2)
    if rc == 0 and result_file.exists():
        data = json.loads(result_file.read_text())
    else:
        reason = (f"timed out after its {budget} s budget" if rc is None
                  else f"the step's process exited with status {rc} and wrote no result")
        data = {"name": name, "status": "failed", "reason": reason, "device": args.device,
                "checks": [], "measurements": {}, "skipped": [], "notes": [],
                "output_tail": _tail(output)}
    data["seconds"] = seconds
    data["budget_s"] = budget
    return data, output


def _environment(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "device": device, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    ignored = {c: os.environ[c] for c in CONTROLS if c in os.environ}
    if ignored:
        env["ignored_controls"] = ignored
    for name in ("PIL", "numba", "sglang", "transformers"):
        try:
            env[name] = importlib.import_module(name).__version__
        except Exception as exc:  # noqa: BLE001
            env[name] = f"not importable ({type(exc).__name__})"
    return env


def text_report(report: dict[str, Any]) -> str:
    """The human summary: one block per step with its checks, skips and key measurements."""
    lines = [f"check_all on {report['environment'].get('gpu', report['device'])}: "
             f"{report['summary']} in {report['seconds']} s",
             "environment: " + ", ".join(f"{k}={v}" for k, v in report["environment"].items())]
    for step in report["steps"]:
        head = f"\n[{step['status'].upper()}] {step['name']} ({step['seconds']} s of "
        head += f"{step.get('budget_s', '?')} s)"
        if step.get("reason"):
            head += f": {step['reason']}"
        lines.append(head)
        for check in step["checks"]:
            detail = {k: v for k, v in check.items() if k not in ("name", "ok")}
            lines.append(f"  {'PASS' if check['ok'] else 'FAIL'} {check['name']}"
                         + (f"  {json.dumps(detail, default=str)}" if detail else ""))
        for skip in step["skipped"]:
            lines.append(f"  SKIP {skip['what']}: {skip['reason']}")
        for key, value in step["measurements"].items():
            lines.append(f"  {key}: {json.dumps(value, default=str)}")
        for note in step["notes"]:
            lines.append(f"  note: {note}")
        if step.get("output_tail"):
            lines.append("  output tail:\n    " + step["output_tail"].replace("\n", "\n    "))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="smaller inputs (dry run)")
    parser.add_argument("--out", help="report folder (default: $OUT, else benchmarks/results/gpu)")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated subset")
    parser.add_argument("--inject", default=os.environ.get(INJECT_ENV),
                        help="STEP:raise|wrong|hang,...: break steps on purpose (tests)")
    parser.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS",
                        help="override a step's time budget")
    parser.add_argument("--step", help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--inject-mode", help=argparse.SUPPRESS)
    parser.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        return _child(args)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available; use --device cpu for the dry run", file=sys.stderr)
        return 2
    names = [n for n in args.steps.split(",") if n]
    unknown = sorted(set(names) - set(STEPS))
    if unknown:
        raise SystemExit(f"unknown steps {unknown}; known: {', '.join(STEPS)}")
    injections = _injections(args.inject)
    args.budgets = {}
    for item in args.budget:
        step, _, seconds = item.partition("=")
        if step not in STEPS or not seconds.replace(".", "", 1).isdigit():
            raise SystemExit(f"bad --budget {item!r}: expected STEP=SECONDS")
        args.budgets[step] = float(seconds)
    out = Path(args.out or os.environ.get("OUT") or ROOT / "benchmarks" / "results" / "gpu")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report: dict[str, Any] = {"device": args.device, "quick": args.quick,
                              "environment": _environment(args.device), "steps": [],
                              "injected": injections or None}
    logs: list[str] = []
    counts = {"failed": 0}
    for index, name in enumerate(names):
        data, output = run_step_isolated(name, args, injections.get(name), out)
        report["steps"].append(data)
        logs.append(f"===== {name}: {data['status']} ({data['seconds']} s)\n{output}")
        print(f"{name}: {data['status']} ({data['seconds']} s)"
              + (f": {data['reason']}" if data.get("reason") else ""), flush=True)
        (out / f"step-{name}.json").unlink(missing_ok=True)
        # After every step, so a run cut short from outside still leaves the steps it finished.
        pending = names[index + 1:]
        counts = write_reports(out, report, logs, time.perf_counter() - start, pending)
    print(text_report(report))
    return 1 if counts["failed"] else 0


def write_reports(out: Path, report: dict[str, Any], logs: list[str], seconds: float,
                  pending: list[str]) -> dict[str, int]:
    """check_all.json/.txt/.log as they stand; the steps not yet run are named in the summary."""
    counts = {s: sum(1 for d in report["steps"] if d["status"] == s)
              for s in ("ok", "skipped", "failed")}
    report["summary"] = ", ".join(f"{v} {k}" for k, v in counts.items())
    if pending:
        report["summary"] += f" (still to run: {', '.join(pending)})"
    report["seconds"] = round(seconds, 1)
    (out / "check_all.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "check_all.txt").write_text(text_report(report))
    (out / "check_all.log").write_text("\n".join(logs))
    return counts


if __name__ == "__main__":
    raise SystemExit(main())
