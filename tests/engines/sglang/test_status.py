"""What applies and what stands aside on this release, and that revert restores originals."""

from __future__ import annotations

import pytest

from vlm_fastpath.patches import REGISTRY

from .conftest import EXPECTED


def test_status_matches_release(patched):
    expected = EXPECTED.get(patched["version"])
    if expected is None:
        pytest.skip(f"no expectations pinned for sglang {patched['version']}")
    got = {r.name: r.status.value for r in REGISTRY.status("sglang")}
    assert got == expected, [r.as_dict() for r in REGISTRY.status("sglang")]


def test_every_applied_patch_changed_something_and_revert_restores_identity(engine):
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    applied = [r.name for r in REGISTRY.status("sglang") if r.status.value == "applied"]
    now = engine["snapshot"]()
    changed = {k for k, v in engine["originals"].items() if now.get(k) is not v}
    if applied:
        assert changed, "patches reported applied but nothing was replaced"
    else:
        assert not changed
    REGISTRY.revert(engine="sglang")
    after = engine["snapshot"]()
    for key, original in engine["originals"].items():
        assert after[key] is original, key


BEYOND_UPSTREAM = {"sglang-qwen-vl-cpu-image-processor", "sglang-qwen-vl-cpu-video-processor",
                   "sglang-kimi-k25-fused-cpu-processor", "sglang-fast-image-decode",
                   "sglang-qwen-compact-image-rows", "sglang-qwen2-vl-compact-rows",
                   "sglang-qwen2-5-vl-compact-rows", "sglang-qwen3-vl-compact-rows"}


def test_on_0_5_23_everything_stands_aside(patched):
    if patched["version"] != "0.5.23":
        pytest.skip("0.5.23 only")
    # The backports all stand aside on 0.5.23. Our Qwen-VL and Kimi CPU processors are not
    # backports (0.5.23 still preprocesses on the CPU with transformers' / the checkpoint's
    # processor where it does so on the CPU): they alone apply.
    applied = {r.name for r in REGISTRY.status("sglang") if r.status.value == "applied"}
    assert applied <= BEYOND_UPSTREAM, applied
    REGISTRY.revert(engine="sglang", patches=BEYOND_UPSTREAM)
    try:
        now = patched["snapshot"]()
        assert all(now[k] is v for k, v in patched["originals"].items())
        assert not [r for r in REGISTRY.status("sglang") if r.status.value == "applied"]
    finally:
        REGISTRY.apply(engine="sglang", patches=BEYOND_UPSTREAM)
