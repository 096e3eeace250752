"""``vlm-fastpath doctor`` answers, with exit code 0, in text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vlm_fastpath", "doctor", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_doctor_text() -> None:
    proc = _doctor()
    assert proc.returncode == 0, proc.stderr
    assert "vlm-fastpath 0.1.0" in proc.stdout
    assert "pillow" in proc.stdout and "numba kernel: yes" in proc.stdout
    assert "threading layer: workqueue" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("what vlm-fastpath changes here: ")


def test_doctor_json_lists_every_patch() -> None:
    proc = _doctor("--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["packages"]["pillow"]
    assert report["numba"]["numba"] is True
    from vlm_fastpath.patches.core.registry import REGISTRY

    names = {p.name for p in REGISTRY.patches()}
    assert {p["name"] for p in report["patches"]} == names
    for patch in report["patches"]:
        assert patch["status"] in {
            "pending", "applied", "upstream", "not-needed", "unsupported-version", "disabled",
            "failed", "faulted", "stood-aside",
        }


def test_doctor_with_everything_disabled() -> None:
    import os

    env = dict(os.environ, VLM_FASTPATH="0")
    proc = subprocess.run(
        [sys.executable, "-m", "vlm_fastpath", "doctor", "--json", "--no-import"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["disabled"] is True
    assert all(p["status"] == "disabled" for p in report["patches"])


def test_doctor_says_which_resampler_runs() -> None:
    proc = _doctor()
    assert proc.returncode == 0, proc.stderr
    assert "resize: numba-fused (Pillow" in proc.stdout or "resize: pillow (" in proc.stdout
    report = json.loads(_doctor("--json").stdout)
    assert report["resampler"]["resampler"] in {"numba-fused", "pillow"}
    assert report["resampler"]["reason"]


def test_doctor_module_lists_the_patches_touching_it() -> None:
    proc = _doctor("--no-import", "--module", "sglang.srt.models.kimi_k25")
    assert proc.returncode == 0, proc.stderr
    assert "patches touching sglang.srt.models.kimi_k25:" in proc.stdout
    for name in ("sglang-moonvit-max-seqlen-once", "sglang-kimi-k25-encoder-dp-owner-only",
                 "sglang-kimi-k25-deferred-owner"):
        assert name in proc.stdout
    assert "sglang-batched-feature-h2d" not in proc.stdout
    report = json.loads(_doctor("--json", "--no-import", "--module", "vllm.transformers_utils."
                                "processor").stdout)
    assert [p["name"] for p in report["patches"]] == ["vllm-processor-cls-overrides"]
    assert report["patches"][0]["change"] == "kimi_processor"


def test_a_module_the_release_lacks_is_no_import_error(monkeypatch, tmp_path) -> None:
    """Found by the release sweep: on SGLang < 0.5.17 doctor listed the absent Kimi K3 modules
    as import errors although their patches correctly say not-needed."""
    from types import SimpleNamespace

    from vlm_fastpath import doctor

    pkg = tmp_path / "fake_engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("import fake_engine_pkg.not_there_either\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_engine_pkg  # noqa: F401 - the parent is loaded, as the engine's is

    patches = [SimpleNamespace(engine="fake", trigger="fake_engine_pkg.absent"),
               SimpleNamespace(engine="fake", trigger="fake_engine_pkg.broken")]
    monkeypatch.setattr(doctor, "_dist_version", lambda name: "1.0")
    from vlm_fastpath.patches.core import registry

    monkeypatch.setattr(registry.REGISTRY, "patches", lambda engine=None: patches)
    report: dict = {}
    doctor._import_triggers(report)
    assert list(report["import_errors"]) == ["fake_engine_pkg.broken"]


def test_doctor_reports_the_output_pool(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "64")
    proc = _doctor()
    assert proc.returncode == 0, proc.stderr
    assert "output pool: up to 64 MiB kept" in proc.stdout
    monkeypatch.delenv("VLM_FASTPATH_BUFFER_POOL_MB")
    pool = json.loads(_doctor("--json").stdout)["resampler"]["output_pool"]
    assert pool["limit_mb"] == 512 and pool["idle_mb"] == 0 and pool["reused"] == 0


def _entry(name: str, status: str, version: str | None = "0.34.0", reason: str = "") -> dict:
    return {"name": name, "engine": "vllm", "engine_version": version, "status": status,
            "reason": reason}


def test_what_changes_says_nothing_when_every_patch_stands_aside() -> None:
    from vlm_fastpath.doctor import what_changes

    report = {"disabled": False, "patches": [
        _entry("a", "upstream"), _entry("b", "unsupported-version"), _entry("c", "upstream"),
    ]}
    assert what_changes(report) == (
        "nothing: every patch stands aside on vllm 0.34.0 (2 upstream, 1 unsupported-version)"
    )
    report["disabled"] = True
    assert what_changes(report).startswith("nothing: VLM_FASTPATH=0")
    report = {"disabled": False, "patches": [_entry("a", "pending", version=None)]}
    assert what_changes(report) == "nothing: neither vLLM nor SGLang is installed"


def test_what_changes_names_the_applied_patches_and_unverified_releases() -> None:
    from vlm_fastpath.doctor import what_changes

    report = {"disabled": False, "patches": [
        _entry("a", "applied", reason="x (vllm 0.34.0 not verified by the sweep; contract held)"),
        _entry("b", "upstream"), _entry("c", "applied", reason="y"),
    ]}
    assert what_changes(report) == (
        "2 patch(es) change vllm 0.34.0: a, c (1 on a release the sweep has not verified; "
        "contract held)"
    )


def test_doctor_reports_both_models_kernels() -> None:
    proc = _doctor("--json")
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads(proc.stdout)["numba"]["kernels"]
    assert set(kernels) == {"kimi", "qwen"}
    for model, info in kernels.items():
        assert info["numba"] is True, (model, info)
        assert info.get("threading_layer") == "workqueue", (model, info)
    text = _doctor().stdout
    assert "  kimi patchify: numba" in text and "  qwen patchify: numba" in text
