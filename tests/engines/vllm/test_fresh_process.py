"""Fresh interpreters: the plugin entry point, VLM_FASTPATH=0, revert, numba under threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from vlm_fastpath.imaging.decode import unavailable_reason

REPO = Path(__file__).resolve().parents[3]
FUSED_UPSTREAM = Version("0.25")
UINT8_UPSTREAM = Version("0.32")  # vLLM normalizes Kimi pixels on the device itself
MAX_SEQLEN_UPSTREAM = Version("0.23")  # MoonViT max_seqlen on the host
LOADER_UPSTREAM = Version("0.34")  # ImageMediaIO.load_bytes turns a bomb into a ValueError
FAST_DECODE_FROM = Version("0.24")  # load_bytes normalizes the opened image (exact fast decode)
OURS = "vlm_fastpath.patches.adapters.kimi_vision.FastpathKimiVisionProcessor"
# The Qwen-VL patches hook vLLM's processing context, which every multimodal model imports
# (the Kimi probes too): applied; they serve no Kimi model (tests/engines/vllm/
# test_qwen_processor.py covers the models they serve).
QWEN_APPLIED = dict.fromkeys(("vllm-qwen-vl-image-processor", "vllm-qwen-vl-video-processor"),
                             "applied")
# Their modules (the Qwen towers, the API server's InputProcessor) are not imported by a Kimi
# processor's build: waiting for them.
COMPACT_STATUSES = dict.fromkeys(("vllm-qwen-compact-image-rows", "vllm-qwen2-vl-compact-rows",
                                 "vllm-qwen2-5-vl-compact-rows", "vllm-qwen3-vl-compact-rows"),
                                "pending")
COMPACT_STATUSES["vllm-qwen-compact-mixed-batch"] = "applied"  # vllm.multimodal.inputs is loaded


def _probe(scenario: str, model_dir: Path, **env: str) -> dict:
    full_env = dict(os.environ, **env)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engines.vllm.probe", scenario, str(model_dir)],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _expected(version: Version) -> dict[str, str]:
    device_normalize = "upstream" if version >= UINT8_UPSTREAM else "applied"
    moonvit = "upstream" if version >= MAX_SEQLEN_UPSTREAM else "applied"
    loader = "upstream" if version >= LOADER_UPSTREAM else "applied"
    fast_decode = "unsupported-version" if version < FAST_DECODE_FROM else (
        "stood-aside" if unavailable_reason() else "applied")
    if version >= FUSED_UPSTREAM:
        return {
            "vllm-processor-cls-overrides": "upstream",
            "vllm-kimi-processor": "upstream",
            "vllm-kimi-fused-processor": "applied",
            "vllm-kimi-device-normalize": device_normalize,
            "vllm-moonvit-max-seqlen": moonvit,
            "vllm-image-loader-client-errors": loader,
            "vllm-fast-image-decode": fast_decode,
            "vllm-threaded-mm-hash": "applied",
            "vllm-vision-chunk-hash-bytes": "applied",
            **QWEN_APPLIED,
            **COMPACT_STATUSES,
        }
    return {
        "vllm-processor-cls-overrides": "applied",
        "vllm-kimi-processor": "applied",
        "vllm-kimi-fused-processor": "unsupported-version",
        "vllm-kimi-device-normalize": device_normalize,
        "vllm-moonvit-max-seqlen": moonvit,
        "vllm-image-loader-client-errors": loader,
        "vllm-fast-image-decode": fast_decode,
        "vllm-threaded-mm-hash": "applied",
        "vllm-vision-chunk-hash-bytes": "applied",
        **QWEN_APPLIED,
        **COMPACT_STATUSES,
    }


def test_entry_point_applies_patches(model_dir, vllm_version):
    result = _probe("plugin", model_dir)
    assert "vlm_fastpath=vlm_fastpath.activation:register_vllm" in result["entry_points"]
    assert result["armed"] == ["vllm"]
    assert result["status"] == _expected(vllm_version)
    assert result["processor"] == OURS


def test_disabled_then_apply_then_revert(model_dir, vllm_version):
    result = _probe("disabled", model_dir, VLM_FASTPATH="0")
    assert set(result["status_off"].values()) == {"disabled"}
    assert result["processor_off"] != OURS  # vLLM untouched
    assert result["status_on"] == _expected(vllm_version)
    assert result["processor_on"] == OURS
    assert result["changed_on"], "apply() changed nothing"
    assert result["not_restored"] == []
    assert set(result["changed_on"]) <= set(result["restored"])
    assert result["processor_reverted"] == result["processor_off"]


def test_two_threads_under_workqueue(model_dir):
    result = _probe("threads", model_dir, NUMBA_THREADING_LAYER="workqueue")
    assert result["processor"] == "FastpathKimiVisionProcessor"
    assert result["errors"] == []
    assert result["env_layer"] == "workqueue"
    assert result["backend"]["numba"] is True
    if "threading_layer" in result["backend"]:
        assert result["backend"]["threading_layer"] == "workqueue"
