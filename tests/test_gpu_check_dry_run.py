"""The GPU check (benchmarks/gpu/check_all.py) dry-runs on the CPU, so its code cannot rot.

Every step must be present and ok or skipped with a reason; the CUDA-only measurements must be
named as skipped; a broken step must be reported as failed while the others still run.
Here (no SGLang) ``syncs`` reports "skipped" and ``ipc`` runs its stand-in proxy; the engine suite
runs both on the release's code (tests/engines/sglang/test_gpu_check_dry_run.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "check_all.py"
STEPS = ("deferred", "h2d", "syncs", "ipc", "normalize", "host_cpu")
# A step's budget is wall-clock. The tool's CPU budgets (60-300 s) suit a person's dry run, but
# on a loaded 2-core machine a step's real work outlasts them (the deferred step ran past its
# 60 s beside two busy processes and another test suite). Here a budget only has to catch a
# hang, so these runs give every step a generous one (the budget test sets its own).
STEP_BUDGET_S = 600
RUN_TIMEOUT_S = 1200  # the whole check; it takes 1-2 min even on that loaded machine


def generous_budgets(*steps: str) -> list[str]:
    """``--budget STEP=STEP_BUDGET_S`` for each of ``steps``."""
    return [arg for step in steps for arg in ("--budget", f"{step}={STEP_BUDGET_S}")]


def run_check(out: Path, *extra: str, timeout: float = RUN_TIMEOUT_S
              ) -> tuple[int, dict, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    report = json.loads((out / "check_all.json").read_text())
    assert (out / "check_all.txt").read_text().startswith("check_all on cpu")
    return proc.returncode, report, proc.stdout + proc.stderr


def by_name(report: dict) -> dict[str, dict]:
    return {step["name"]: step for step in report["steps"]}


def test_dry_run_every_step_ok_or_skipped(tmp_path):
    rc, report, output = run_check(tmp_path, *generous_budgets(*STEPS))
    steps = by_name(report)
    assert tuple(steps) == STEPS
    for name, step in steps.items():
        assert step["status"] in ("ok", "skipped"), (name, step.get("reason"), output[-3000:])
        if step["status"] == "skipped":
            assert step["reason"], name
        assert all(check["ok"] for check in step["checks"]), (name, step["checks"])
        for skip in step["skipped"]:
            assert skip["reason"], (name, skip)
    assert rc == 0, output[-3000:]
    # the steps that need no SGLang ran their checks, and named what only CUDA can measure
    for name in ("deferred", "h2d", "normalize"):
        assert steps[name]["status"] == "ok"
        assert steps[name]["checks"], name
        assert any(s["reason"] == "skipped (needs CUDA)" for s in steps[name]["skipped"]), name
    host = steps["host_cpu"]
    assert host["status"] == "ok" and host["checks"][0]["counts"].get("passed", 0) > 0, host
    assert host["measurements"]["host"]["usable_cores"] >= 1
    try:
        import sglang  # noqa: F401
    except ImportError:
        assert steps["syncs"]["status"] == "skipped"
        assert "sglang not importable" in steps["syncs"]["reason"]
        # without SGLang the IPC protocol still runs: stand-in proxy, spawned ranks
        assert steps["ipc"]["status"] == "ok"
        assert "stand-in" in steps["ipc"]["measurements"]["transport"]
        assert len(steps["ipc"]["checks"]) >= 4


def test_broken_steps_are_reported_and_the_others_run(tmp_path):
    """A step that raises, one that hangs past its budget and one whose comparison is wrong:
    each is reported as failed, and every later step still runs.

    The budget is proven by the report, not a clock: the hang sleeps 10,000 s, so only the
    budget's kill ends it (the check's own timeout would fail the test first)."""
    rc, report, output = run_check(
        tmp_path, "--steps", "deferred,normalize,h2d", *generous_budgets("deferred", "h2d"),
        "--budget", "normalize=5", "--inject", "deferred:raise,normalize:hang,h2d:wrong",
    )
    steps = by_name(report)
    assert rc == 1, output[-3000:]
    assert steps["deferred"]["status"] == "failed"
    assert "injected failure" in steps["deferred"]["reason"]
    assert steps["normalize"]["status"] == "failed"
    assert steps["normalize"]["reason"] == "timed out after its 5.0 s budget"
    assert steps["h2d"]["status"] == "failed"
    h2d = steps["h2d"]["checks"]
    assert any(not c["ok"] for c in h2d) and any(c["ok"] for c in h2d)  # it ran, one broke
