"""The SGLang steps of the GPU check (benchmarks/gpu/check_all.py) dry-run on this release.

The core suite has no SGLang, so there ``syncs`` and ``ipc`` report "skipped"; here they run
their real code paths on the CPU (the release's MoonViT with the transfer recorder; the
release's pool and proxy across spawned processes over CPU shared memory), so the GPU check
cannot rot before a GPU is lent. Only on the release whose wheel travels to the GPU machine
(benchmarks/gpu/README.md): the other releases' patches are covered by their own suites, and
the run costs minutes on a 2-core box (three processes import SGLang).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "gpu" / "check_all.py"
GPU_RELEASE = "0.5.15.post1"  # the SGLang wheel the device command carries


@pytest.fixture(scope="module")
def report(engine, tmp_path_factory):
    if engine["version"] != GPU_RELEASE:
        pytest.skip(f"the GPU check carries sglang {GPU_RELEASE}, not {engine['version']}")
    out = tmp_path_factory.mktemp("gpu-check")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--steps", "syncs,ipc",
         # wall-clock budgets that only a hang outlasts (the tool's own suit a person's run;
         # a loaded 2-core machine outlasts them: tests/test_gpu_check_dry_run.py)
         "--budget", "syncs=600", "--budget", "ipc=600", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    data = json.loads((out / "check_all.json").read_text())
    data["_rc"], data["_output"] = proc.returncode, proc.stdout + proc.stderr
    return {step["name"]: step for step in data["steps"]} | {"_meta": data}


@pytest.mark.parametrize("name", ["syncs", "ipc"])
def test_sglang_step_runs_and_passes(engine, report, name):
    step = report[name]
    assert step["status"] == "ok", (step.get("reason"), report["_meta"]["_output"][-4000:])
    assert step["checks"] and all(check["ok"] for check in step["checks"]), step["checks"]
    assert step["measurements"]["sglang"] == engine["version"]
    assert any(s["reason"] == "skipped (needs CUDA)" for s in step["skipped"])


def test_syncs_step_counts_what_the_suite_counts(engine, report):
    runs = report["syncs"]["measurements"]["runs"]
    patched = {k: v["syncs_per_forward"] for k, v in runs.items() if k.endswith(" patched")}
    assert patched and set(patched.values()) == {0}, runs
    if engine["version"] in ("0.5.12.post1", "0.5.15.post1"):
        unpatched = {k: v["syncs_per_forward"] for k, v in runs.items()
                     if k.endswith("unpatched")}
        assert set(unpatched.values()) == {30}, runs


def test_ipc_step_used_the_release_transport(engine, report):
    measurements = report["ipc"]["measurements"]
    assert "the release's" in measurements["transport"]
    assert measurements["copies_all_ranks"] < measurements["copies_if_every_rank_copied"]
