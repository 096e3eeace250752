"""Activation in a fresh interpreter: SGLang's plugin loader, and VLM_FASTPATH=0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import EXPECTED, K3_MODULES, SGLANG_MODULES, _present

SCRIPT = r"""
import importlib, json, sys
mods = %(mods)r
use_loader = %(use_loader)r
if use_loader:
    from sglang.srt.plugins import load_plugins
    load_plugins()
for name in mods:
    importlib.import_module(name)
from vlm_fastpath.patches import REGISTRY
status = {r.name: r.status.value for r in REGISTRY.status("sglang")}
kimi = sys.modules["sglang.srt.models.kimi_k25"]
mm = sys.modules["sglang.srt.managers.mm_utils"]
touched = {
    "encoder_forward": hasattr(kimi.MoonViT3dEncoder.forward, "__wrapped__"),
    "move": hasattr(getattr(mm, "_move_items_to_device", None), "__wrapped__"),
}
print("RESULT" + json.dumps({"status": status, "touched": touched}))
"""


def run_fresh(use_loader: bool, **env):
    code = SCRIPT % {"mods": list(SGLANG_MODULES + _present(K3_MODULES)), "use_loader": use_loader}
    full_env = {**os.environ, **env}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


@pytest.fixture(scope="module")
def version(engine):
    return engine["version"]


def test_plugin_entry_point_is_registered():
    from importlib.metadata import entry_points

    values = [ep.value for ep in entry_points(group="sglang.srt.plugins")]
    assert "vlm_fastpath.activation:register_sglang" in values


def test_load_plugins_applies_in_fresh_process(version):
    result = run_fresh(True, VLM_FASTPATH="1")
    expected = EXPECTED.get(version)
    if expected is not None:
        assert result["status"] == expected
    if expected and expected["sglang-moonvit-max-seqlen-once"] == "applied":
        assert result["touched"]["encoder_forward"] is True


def test_disabled_leaves_sglang_untouched(version):
    result = run_fresh(True, VLM_FASTPATH="0")
    assert set(result["status"].values()) == {"disabled"}
    assert result["touched"] == {"encoder_forward": False, "move": False}


def test_skip_list_is_honoured(version):
    result = run_fresh(True, VLM_FASTPATH_SKIP="sglang-moonvit-max-seqlen-once")
    assert result["status"]["sglang-moonvit-max-seqlen-once"] == "disabled"
    assert result["touched"]["encoder_forward"] is False
