"""MoonViT with the SDPA vision backend: device-to-host syncs per forward (real tower, CPU).

Up to 0.5.15.post1 each SDPA block builds its mask from ``cu_seqlens.cpu().tolist()``; with
``sglang-moonvit-sdpa-host-cu-seqlens`` + ``sglang-vision-host-max-seqlen`` it uses the host
``cu_seqlens`` of the forward: 0 syncs, identical outputs, and the mask moves to the device
once per forward without blocking (the release copies it, blocking, in every block).
"""

from __future__ import annotations

import pytest
import torch

from fixtures import sglang_cpu as _testing
from vlm_fastpath.patches import REGISTRY

GRIDS = [(1, 4, 4), (1, 8, 6), (1, 6, 6)]
SDPA = "sglang-moonvit-sdpa-host-cu-seqlens"
# 27 per-block .cpu() (SDPA mask) + 3 grid .tolist() before 0.5.16.
UNPATCHED_SYNCS = {"0.5.12.post1": 30, "0.5.15.post1": 30}


@pytest.fixture(scope="module")
def sdpa_model(engine):
    REGISTRY.revert(engine="sglang")
    try:
        model = _testing.build_kimi_k25(backend="sdpa")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MoonViT cannot be built outside a server on {engine['version']}: {exc}")
    backends = {type(block.attn.qkv_backend).__name__
                for block in model.vision_tower.encoder.blocks}
    assert backends == {"VisionSdpaAttention"}
    return model


def run_forward(model, items):
    recorder = _testing.TransferRecorder()
    with recorder, torch.no_grad():
        recorder.place(model)
        out = model.get_image_feature(items)
    return out, recorder


def mask_copies(recorder) -> list[bool]:
    """``non_blocking`` of each host-to-device copy the size of the forward's SDPA mask."""
    tokens = sum(t * h * w for t, h, w in GRIDS)
    return [c.non_blocking for c in recorder.h2d if c.nbytes == tokens * tokens]


def test_sdpa_syncs_before_and_after(engine, sdpa_model):
    if engine["version"] not in UNPATCHED_SYNCS:
        pytest.skip(f"the SDPA patch does not apply to sglang {engine['version']}")
    items = _testing.kimi_items(GRIDS)
    REGISTRY.revert(engine="sglang")
    run_forward(sdpa_model, items)  # warm-up: lazily built rope tables
    before, rec_before = run_forward(sdpa_model, items)
    REGISTRY.apply(engine="sglang")
    try:
        statuses = {r.name: r.status.value for r in REGISTRY.status("sglang")}
        assert statuses[SDPA] == "applied"
        after, rec_after = run_forward(sdpa_model, items)
    finally:
        REGISTRY.revert(engine="sglang")
    reverted, rec_reverted = run_forward(sdpa_model, items)
    assert rec_before.sync_count == UNPATCHED_SYNCS[engine["version"]], rec_before.syncs
    assert rec_before.syncs.count("cpu") == 27
    assert rec_after.sync_count == 0, rec_after.syncs
    assert rec_reverted.sync_count == rec_before.sync_count
    # The mask's copy to the device: the release makes a blocking one in every block (on CUDA
    # each is a sync: 27 more per forward on an H200); patched, one non-blocking per forward.
    assert mask_copies(rec_before) == [False] * 27
    assert mask_copies(rec_after) == [True]
    assert mask_copies(rec_reverted) == [False] * 27
    assert torch.equal(before, after)
    assert torch.equal(before, reverted)
    assert before.shape[0] == sum(t * h * w for t, h, w in GRIDS) // 4


def test_sdpa_stands_aside_without_our_moonvit_patch(engine, sdpa_model):
    """Only the MoonViT patch's ``HostMaxSeqlen`` makes the host mask usable: without it the SDPA
    patch is "not-needed", the release's code runs (its syncs included), outputs identical."""
    if engine["version"] not in UNPATCHED_SYNCS:
        pytest.skip(f"the SDPA patch does not apply to sglang {engine['version']}")
    items = _testing.kimi_items(GRIDS)
    REGISTRY.revert(engine="sglang")
    run_forward(sdpa_model, items)
    before, rec_before = run_forward(sdpa_model, items)
    REGISTRY.apply(engine="sglang", patches=[SDPA, "sglang-vision-host-max-seqlen"])
    try:
        statuses = {r.name: r.status.value for r in REGISTRY.status("sglang")}
        assert statuses[SDPA] == "not-needed"
        after, rec_after = run_forward(sdpa_model, items)
    finally:
        REGISTRY.revert(engine="sglang")
    assert rec_after.sync_count == rec_before.sync_count
    assert torch.equal(before, after)


def test_sdpa_host_mask_is_ignored_when_it_disagrees(engine, sdpa_model):
    """A host grid that does not describe the call's ``cu_seqlens`` is never used."""
    if engine["version"] not in UNPATCHED_SYNCS:
        pytest.skip(f"the SDPA patch does not apply to sglang {engine['version']}")
    from vlm_fastpath.patches.sglang.vision_max_seqlen import _host_seqlens

    attn = sdpa_model.vision_tower.encoder.blocks[0].attn.qkv_backend
    q = torch.randn(10, 2, 16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    REGISTRY.revert(engine="sglang")
    expected = attn(q, q, q, bsz=1, cu_seqlens=cu, max_seqlen=_host_seqlens.HostMaxSeqlen(6))
    REGISTRY.apply(engine="sglang")
    try:
        wrong = _host_seqlens.HostSeqlens(torch.tensor([[1, 2, 5]]))  # one segment of 10
        token = _host_seqlens.HOST_SEQLENS.set(wrong)
        try:
            got = attn(q, q, q, bsz=1, cu_seqlens=cu, max_seqlen=_host_seqlens.HostMaxSeqlen(6))
        finally:
            _host_seqlens.HOST_SEQLENS.reset(token)
    finally:
        REGISTRY.revert(engine="sglang")
    assert torch.equal(expected, got)
