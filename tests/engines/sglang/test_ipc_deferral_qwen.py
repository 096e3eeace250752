"""Owner-only CUDA-IPC materialization under encoder DP for Qwen2.5-VL / Qwen3-VL(-MoE).

Same simulation as ``test_ipc_deferral.py`` (``_ipc_sim``: TP ranks as threads, recording
proxies over the release's transport proxy, the release's ``from_processor_output``, chunked
embedding cache and ``run_dp_sharded_mrope_vision_model``), with the real Qwen-VL model classes'
``get_image_feature`` over a small stand-in vision tower and the Qwen-VL processor's marker.
"""

from __future__ import annotations

import pytest
import torch

from fixtures import ipc_sim as _ipc_sim
from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.sglang.encoder_dp_ipc import _switches

from .conftest import EXPECTED

QWEN_PATCHES = (
    "sglang-qwen2-5-vl-encoder-dp-owner-only",
    "sglang-qwen3-vl-encoder-dp-owner-only",
    "sglang-qwen-vl-defer-ipc-marker",
)
SHARED = (
    "sglang-ipc-consumer-count",
    "sglang-ipc-deferred-reconstruction",
    "sglang-encoder-dp-local-loader",
    "sglang-ipc-cache-hit-release",
)
NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")
FAMILIES = tuple(_ipc_sim.QWEN_FAMILIES)
OWNER = {"qwen2_5_vl": QWEN_PATCHES[0], "qwen3_vl": QWEN_PATCHES[1],
         "qwen3_vl_moe": QWEN_PATCHES[1]}


@pytest.fixture
def ipc_engine(engine):
    if engine["version"] not in NEEDS_IT:
        pytest.skip(f"sglang {engine['version']}: Qwen owner-only loading not patched here")
    return engine


def _applied():
    return {r.name for r in REGISTRY.status("sglang") if r.status.value == "applied"}


def test_status_per_version(patched):
    expected = EXPECTED.get(patched["version"])
    if expected is None:
        pytest.skip("no expectations pinned")
    got = {r.name: r.status.value for r in REGISTRY.status("sglang") if r.name in QWEN_PATCHES}
    assert got == {name: expected[name] for name in QWEN_PATCHES}


@pytest.mark.parametrize("family", FAMILIES)
def test_requests_owner_only_and_every_slot_released_once(ipc_engine, family):
    requests = _ipc_sim.random_requests(300, seed=7)
    requests += [_ipc_sim.distinct_images_request(8, 3, first_hash=500)]  # fewer images than TP
    REGISTRY.revert(engine="sglang")
    base = _ipc_sim.run_requests(requests, patched=False, family=family)
    REGISTRY.apply(engine="sglang")
    try:
        assert set(QWEN_PATCHES + SHARED) <= _applied()
        run = _ipc_sim.run_requests(requests, patched=True, family=family)
    finally:
        REGISTRY.revert(engine="sglang")
    # unpatched: every rank copies every image; patched: one copy per image, except an image
    # that misses in a chunk that is not its last: every rank copies that one
    assert base.copies == [tp * len(images) for tp, images, _ in requests]
    for c, (tp, images, split) in zip(run.copies, requests, strict=True):
        assert c <= len(images) + (tp - 1) * len(_ipc_sim.straddling(images, split))
    assert sum(run.copies) < sum(len(images) for _, images, _ in requests)  # cache hits
    for slots in (base.slots, run.slots):
        assert [s.released for s in slots] == [1] * len(slots)  # exactly once
        assert not any(s.touched_after_release for s in slots)
        assert all(float(s.flag[0]) == 0.0 for s in slots)
    # patched: one rank (the owner, or rank 0 on a cache hit) accounts for each slot, with
    # the full TP size as consumer count in one go, or (a straddling miss) every rank adds one
    tps = [tp for tp, images, _ in requests for _ in images]
    for slot, tp in zip(run.slots, tps, strict=True):
        one_rank = len({rank for rank, _ in slot.increments}) == 1
        assert one_rank or sorted(slot.increments) == [(r, 1.0) for r in range(tp)]
        assert sum(amount for _, amount in slot.increments) == tp
    assert not any(s.stale_reads for s in run.slots)
    for a, b in zip(base.outputs, run.outputs, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    for tp, cluster in run.clusters.items():
        counts = [cluster.gathers.count(r) for r in range(tp)]
        assert len(set(counts)) == 1, counts


@pytest.mark.parametrize("tp", [2, 8])
@pytest.mark.parametrize("n_images", [1, 4])
def test_tp_by_images_copy_counts(ipc_engine, tp, n_images):
    requests = [_ipc_sim.distinct_images_request(tp, n_images)]
    for family in FAMILIES:
        REGISTRY.revert(engine="sglang")
        base = _ipc_sim.run_requests(requests, patched=False, family=family)
        REGISTRY.apply(engine="sglang")
        try:
            run = _ipc_sim.run_requests(requests, patched=True, family=family)
        finally:
            REGISTRY.revert(engine="sglang")
        assert base.copies == [tp * n_images] and run.copies == [n_images], family
        assert [s.released for s in run.slots] == [1] * n_images
        assert all(torch.equal(x, y) for x, y in zip(base.outputs[0], run.outputs[0],
                                                     strict=True))


@pytest.mark.parametrize("family", FAMILIES)
def test_owner_patch_off_keeps_every_item_eager(ipc_engine, family):
    """Marker without the model's owner-only wrapper: nothing is deferred, nothing leaks."""
    requests = [_ipc_sim.distinct_images_request(4, 3)]
    REGISTRY.revert(engine="sglang")
    others = [n for n in QWEN_PATCHES + SHARED if n != OWNER[family]]
    REGISTRY.apply(engine="sglang", patches=others)
    try:
        assert OWNER[family] not in _applied()
        run = _ipc_sim.run_requests(requests, patched=True, family=family)
    finally:
        REGISTRY.revert(engine="sglang")
    assert run.copies == [4 * 3]
    assert [s.released for s in run.slots] == [1] * 3


def test_marker_only_for_covered_architectures_and_images(ipc_engine):
    import types

    import sglang.srt.managers.schedule_batch as sb

    from fixtures import sglang_cpu as _testing
    from vlm_fastpath.patches.sglang.encoder_dp_ipc.multimodal_processors_base_processor import (
        mark_qwen_deferrable,
    )

    proxy_cls = _ipc_sim.recording_proxy_class(
        __import__("sglang.srt.utils.cuda_ipc_transport_utils", fromlist=["x"])
        .CudaIpcTensorTransportProxy)

    def items():
        out = []
        for modality in (sb.Modality.IMAGE, sb.Modality.VIDEO):
            out.append(_testing.make_item(sb.MultimodalDataItem, modality,
                                          proxy_cls(torch.zeros(4, 2), _ipc_sim.Slot(0), 0),
                                          {}))
        return out

    def processor(arch, dp=True):
        proc = type("QwenVLImageProcessor", (), {})()
        proc.hf_config = types.SimpleNamespace(architectures=[arch])
        proc.server_args = types.SimpleNamespace(mm_enable_dp_encoder=dp)
        return proc

    on = {"SGL_USE_CUDA_IPC": True}
    got = items()
    assert mark_qwen_deferrable(processor("Qwen3VLMoeForConditionalGeneration"), got, on) == 1
    assert got[0].model_specific_data[_switches.OWNER_KEY] == "Qwen3VLMoeForConditionalGeneration"
    assert _switches.DEFER_KEY not in got[1].model_specific_data  # videos stay eager
    assert mark_qwen_deferrable(processor("Qwen2VLForConditionalGeneration"), items(), on) == 0
    assert mark_qwen_deferrable(processor("Qwen2_5_VLForConditionalGeneration", False),
                                items(), on) == 0
    assert mark_qwen_deferrable(processor("Qwen2_5_VLForConditionalGeneration"), items(),
                                {"SGL_USE_CUDA_IPC": False}) == 0


def test_revert_restores_exact_originals(ipc_engine):
    import sglang.srt.models.qwen2_5_vl as q25
    import sglang.srt.models.qwen3_vl as q3
    import sglang.srt.models.qwen3_vl_moe as q3moe
    import sglang.srt.multimodal.processors.base_processor as bp

    REGISTRY.revert(engine="sglang")
    owners = {
        "q25": q25.Qwen2_5_VLForConditionalGeneration,
        "q3": q3.Qwen3VLForConditionalGeneration,
        "q3moe": q3moe.Qwen3VLMoeForConditionalGeneration,
        "base": bp.BaseMultimodalProcessor,
    }
    before = {k: dict(vars(v)) for k, v in owners.items()}
    REGISTRY.apply(engine="sglang")
    assert _switches.SWITCHES.qwen2_5_owner and _switches.SWITCHES.qwen3_owner
    for arch, (mod, cls, _) in _switches.QWEN_OWNERS.items():
        assert _switches.owner_in_place(mod, cls), arch
    REGISTRY.revert(engine="sglang")
    assert not any(vars(_switches.SWITCHES).values())
    for arch, (mod, cls, _) in _switches.QWEN_OWNERS.items():
        assert not _switches.owner_in_place(mod, cls), arch
    for key, owner in owners.items():
        after = dict(vars(owner))
        assert after.keys() == before[key].keys(), key
        assert all(after[name] is value for name, value in before[key].items()), key
