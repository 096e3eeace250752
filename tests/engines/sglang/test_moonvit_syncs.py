"""MoonViT: device-to-host syncs per forward with the real tower (FA3 forced, stub kernel)."""

from __future__ import annotations

import torch

from fixtures import sglang_cpu as _testing
from vlm_fastpath.patches import REGISTRY

GRIDS = [(1, 4, 4), (1, 8, 6), (1, 6, 6)]
# 27 per-layer .item() + 3 .tolist() before 0.5.16 (shared/UPSTREAM.md section 2); 0 after.
UNPATCHED_SYNCS = {"0.5.12.post1": 30, "0.5.15.post1": 30, "0.5.17": 0, "0.5.23": 0}


def run_forward(model, items):
    recorder = _testing.TransferRecorder()
    with _testing.fa3_stub(recorder), recorder, torch.no_grad():
        recorder.place(model)
        out = model.get_image_feature(items)
    return out, recorder


def test_syncs_before_and_after(engine, kimi_model):
    items = _testing.kimi_items(GRIDS)
    REGISTRY.revert(engine="sglang")
    run_forward(kimi_model, items)  # warm-up: lazily built rope tables
    before, rec_before = run_forward(kimi_model, items)
    REGISTRY.apply(engine="sglang")
    try:
        after, rec_after = run_forward(kimi_model, items)
    finally:
        REGISTRY.revert(engine="sglang")
    reverted, rec_reverted = run_forward(kimi_model, items)
    expected = UNPATCHED_SYNCS.get(engine["version"])
    if expected is not None:
        assert rec_before.sync_count == expected, rec_before.syncs
    assert rec_after.sync_count == 0, rec_after.syncs
    assert rec_reverted.sync_count == rec_before.sync_count
    assert torch.equal(before, after)
    assert torch.equal(before, reverted)
    tokens = sum(t * h * w for t, h, w in GRIDS) // 4
    assert before.shape[0] == tokens

