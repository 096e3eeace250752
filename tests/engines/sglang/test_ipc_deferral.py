"""Deferred CUDA-IPC reconstruction under encoder DP, on the release's own code.

The simulation (TP ranks as threads, a recording double of the release's
``CudaIpcTensorTransportProxy``, the request runner) lives in
``fixtures/ipc_sim.py`` (shared with ``benchmarks/sglang_counts.py``): every
rank deserializes its own copies of a request's items, which go through the release's
``MultimodalInputs.from_processor_output``, its ``_get_chunked_embedding_by_item`` with one
embedding cache per rank, the real ``KimiK25ForConditionalGeneration.get_image_feature`` and
``run_dp_sharded_mrope_vision_model``; pool slots are recycled by the release's
``MmItemMemoryChunk.try_to_recycle``.
"""

from __future__ import annotations

import pytest
import torch

from fixtures import ipc_sim as _ipc_sim
from vlm_fastpath.patches import REGISTRY

from .conftest import EXPECTED
from .conftest import IPC as IPC_PATCHES

NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")


def _run(requests, *, patched: bool, encoder_dp: bool = True):
    run = _ipc_sim.run_requests(requests, patched=patched, encoder_dp=encoder_dp)
    return run.slots, run.outputs, run.copies, run.clusters


@pytest.fixture
def ipc_engine(engine):
    if engine["version"] not in NEEDS_IT:
        pytest.skip(f"sglang {engine['version']} has deferred IPC reconstruction upstream")
    import sglang.srt.models.kimi_k25  # noqa: F401
    import sglang.srt.multimodal.processors.base_processor  # noqa: F401

    return engine


def test_status_per_version(patched):
    expected = EXPECTED.get(patched["version"])
    if expected is None:
        pytest.skip("no expectations pinned")
    got = {r.name: r.status.value for r in REGISTRY.status("sglang") if r.name in IPC_PATCHES}
    assert got == {name: expected[name] for name in IPC_PATCHES}
    if patched["version"] not in NEEDS_IT:
        assert set(got.values()) == {"upstream"}


def test_thousand_requests_owner_only_and_every_slot_released_once(ipc_engine):
    """Attention-TP sizes 1, 2, 4 and 8; the reference is the release's non-DP path (the
    release's own encoder-DP path fails at size 1)."""
    requests = _ipc_sim.random_requests(1000, seed=4)
    assert {tp for tp, _, _ in requests} == {1, 2, 4, 8}
    REGISTRY.revert(engine="sglang")
    base_slots, base_out, base_copies, _ = _run(requests, patched=False, encoder_dp=False)
    REGISTRY.apply(engine="sglang")
    try:
        assert all(r.status.value == "applied" for r in REGISTRY.status("sglang")
                   if r.name in IPC_PATCHES)
        slots, out, copies, clusters = _run(requests, patched=True)
    finally:
        REGISTRY.revert(engine="sglang")
    # unpatched: every rank copies every image; patched: one copy per image, except an image
    # that misses in a chunk that is not its last: every rank copies that one
    assert base_copies == [tp * len(images) for tp, images, _ in requests]
    straddles = [_ipc_sim.straddling(images, split) for _, images, split in requests]
    for c, (tp, images, _), cut in zip(copies, requests, straddles, strict=True):
        assert c <= len(images) + (tp - 1) * len(cut)
    assert sum(copies) < sum(len(images) for _, images, _ in requests)  # cache hits: none
    assert sum(copies) < sum(base_copies) / 2
    for run_slots in (base_slots, slots):
        assert [s.released for s in run_slots] == [1] * len(run_slots)  # exactly once
        assert not any(s.touched_after_release for s in run_slots)
        assert not any(s.stale_reads for s in run_slots)
        assert all(float(s.flag[0]) == 0.0 for s in run_slots)
    # patched: one rank accounts for each slot with the full TP size in one go, or (a
    # straddling miss) every rank adds one
    for slot, tp in zip(slots, [tp for tp, images, _ in requests for _ in images], strict=True):
        ranks = {rank for rank, _ in slot.increments}
        assert sum(amount for _, amount in slot.increments) == tp
        assert len(ranks) == 1 or sorted(slot.increments) == [(r, 1.0) for r in range(tp)]
    # embeddings fed to the model: identical on every rank to the non-DP path's
    for a, b in zip(base_out, out, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    # fewer images than ranks: every rank still joined every all-gather (no rank skipped)
    for tp, cluster in clusters.items():
        counts = [cluster.gathers.count(r) for r in range(tp)]
        assert len(set(counts)) == 1, counts


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("n_images", [1, 4])
def test_tp_by_images_copy_counts(ipc_engine, tp, n_images):
    requests = [_ipc_sim.distinct_images_request(tp, n_images)]
    REGISTRY.revert(engine="sglang")
    _, base_out, base, _ = _run(requests, patched=False, encoder_dp=tp > 1)
    REGISTRY.apply(engine="sglang")
    try:
        slots, out, patched_copies, _ = _run(requests, patched=True)
    finally:
        REGISTRY.revert(engine="sglang")
    straddling = len(_ipc_sim.straddling(*requests[0][1:]))
    assert base == [tp * n_images]
    assert patched_copies == [n_images + (tp - 1) * straddling]
    assert [s.released for s in slots] == [1] * n_images
    assert all(torch.equal(x, y) for x, y in zip(base_out[0], out[0], strict=True))


def test_materialize_packs_with_one_casting_copy(ipc_engine):
    import sglang.srt.multimodal.mm_utils as mm

    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang", patches=["sglang-encoder-dp-local-loader"])
    try:
        feats = [torch.randn(3, 2), torch.randn(5, 2, dtype=torch.float64)]
        packed = mm.materialize_multimodal_features(feats, device="cpu", dtype=torch.float32)
        assert torch.equal(packed, torch.cat([f.to(torch.float32) for f in feats]))
    finally:
        REGISTRY.revert(engine="sglang")
    assert not hasattr(mm, "materialize_multimodal_features")


def test_revert_restores_exact_originals(ipc_engine):
    import sglang.srt.managers.mm_utils as mu
    import sglang.srt.managers.schedule_batch as sb
    import sglang.srt.models.kimi_k25 as kimi
    import sglang.srt.multimodal.mm_utils as mm
    import sglang.srt.multimodal.processors.base_processor as bp
    import sglang.srt.utils.cuda_ipc_transport_utils as transport

    from vlm_fastpath.patches.sglang.encoder_dp_ipc import _switches

    REGISTRY.revert(engine="sglang")
    owners = {
        "proxy": transport.CudaIpcTensorTransportProxy,
        "item": sb.MultimodalDataItem,
        "inputs": sb.MultimodalInputs,
        "model": kimi.KimiK25ForConditionalGeneration,
        "base": bp.BaseMultimodalProcessor,
        "mm": mm,
        "mu": mu,
    }
    before = {k: dict(vars(v)) for k, v in owners.items()}
    kimi_run = kimi.run_dp_sharded_mrope_vision_model
    REGISTRY.apply(engine="sglang")
    assert kimi.run_dp_sharded_mrope_vision_model is not kimi_run
    assert _switches.SWITCHES.all_on()
    assert sb.MultimodalDataItem.acknowledge_deferred_cuda_ipc_feature
    REGISTRY.revert(engine="sglang")
    assert kimi.run_dp_sharded_mrope_vision_model is kimi_run
    assert not _switches.SWITCHES.all_on()
    assert not any(vars(_switches.SWITCHES).values())
    for key, owner in owners.items():
        after = dict(vars(owner))
        assert after.keys() == before[key].keys(), key
        assert all(after[name] is value for name, value in before[key].items()), key


def test_simulation_restores_engine_stubs(ipc_engine):
    import sglang.srt.layers.dp_attention as dpa
    import sglang.srt.managers.mm_utils as mm_utils
    import sglang.srt.server_args as sa

    before = (dpa.get_attention_tp_rank, dpa.get_attention_tp_size, sa.get_global_server_args,
              mm_utils.embedding_cache, torch.cuda.current_device)
    had_group = "get_attention_tp_group" in vars(dpa)
    REGISTRY.revert(engine="sglang")
    _run([_ipc_sim.distinct_images_request(2, 1)], patched=False)
    after = (dpa.get_attention_tp_rank, dpa.get_attention_tp_size, sa.get_global_server_args,
             mm_utils.embedding_cache, torch.cuda.current_device)
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert ("get_attention_tp_group" in vars(dpa)) == had_group


def test_benchmark_copies_table(ipc_engine):
    table = _ipc_sim.copies_table(tps=(2, 8), images=(1, 4))
    assert table == {
        "TP2": {"1": {"unpatched": 2, "patched": 1}, "4": {"unpatched": 8, "patched": 4}},
        "TP8": {"1": {"unpatched": 8, "patched": 1}, "4": {"unpatched": 32, "patched": 4}},
    }
    assert not any(r.status.value == "applied" for r in REGISTRY.status("sglang"))
