"""Lazy CUDA-IPC features across chunk boundaries (ci/sglang/HAZARD-cache-hit-then-miss.md).

The scenarios of ``fixtures/ipc_sim.py`` run on the release's own code: its
``from_processor_output``, embedding cache, ``_get_chunked_embedding_by_item`` (the per-request
path; HIP/NPU on 0.5.16+) or ``_get_chunked_prefill_embedding`` (the dispatcher; on 0.5.16+ its
CUDA path batches misses through ``_batch_encode_per_image_misses``) or
``_get_chunked_embedding_full`` (items with several offsets), the real Kimi K2.5
``get_image_feature``, and the pool's recycler. A copy from a recycled slot reads zeros (the
tokenizer has reused it). The reference is the release's non-DP path, where every rank copies
its features when the request arrives.

On 0.5.12 - 0.5.15.post1 (our backport) nothing may read a recycled slot and every slot is
released exactly once. On 0.5.17 (upstream's #31227) the tests record what the release does.
"""

from __future__ import annotations

import pytest
import torch

from fixtures import ipc_sim as _ipc_sim
from vlm_fastpath.patches import REGISTRY

NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")
SIMULATED = NEEDS_IT + ("0.5.17",)  # 0.5.18+ moved the transport module
SCENARIOS = ("hit_then_miss", "miss_then_miss", "hit_only")
ENTRIES = ("by_item", "prefill")


@pytest.fixture
def sim(engine):
    if engine["version"] not in SIMULATED:
        pytest.skip(f"the IPC simulation does not cover sglang {engine['version']}")
    import sglang.srt.models.kimi_k25  # noqa: F401
    import sglang.srt.multimodal.processors.base_processor  # noqa: F401

    REGISTRY.revert(engine="sglang")
    yield engine
    REGISTRY.revert(engine="sglang")


def _scenario(name, *, patched, entry, encoder_dp=True):
    return getattr(_ipc_sim, name)(2, patched=patched, entry=entry, encoder_dp=encoder_dp)


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for ra, rb in zip(a.outputs, b.outputs, strict=True)
               for x, y in zip(ra, rb, strict=True))


def _facts(run):
    return {
        "released": [s.released for s in run.slots],
        "stale_reads": sum(s.stale_reads for s in run.slots),
        "touched_after_release": sum(s.touched_after_release for s in run.slots),
        "flags": [float(s.flag[0]) for s in run.slots],
    }


@pytest.mark.parametrize("entry", ENTRIES + ("full",))
@pytest.mark.parametrize("name", SCENARIOS)
def test_backport_never_reads_a_recycled_slot(sim, name, entry):
    if sim["version"] not in NEEDS_IT:
        pytest.skip("backport releases only")
    reference = _scenario(name, patched=False, entry=entry, encoder_dp=False)
    REGISTRY.apply(engine="sglang")
    run = _scenario(name, patched=True, entry=entry)
    facts = _facts(run)
    assert facts == {"released": [1] * len(run.slots), "stale_reads": 0,
                     "touched_after_release": 0, "flags": [0.0] * len(run.slots)}, facts
    assert _same(reference, run)


def test_backport_copies_stay_owner_only_outside_the_straddling_miss(sim):
    if sim["version"] not in NEEDS_IT:
        pytest.skip("backport releases only")
    REGISTRY.apply(engine="sglang")
    # hit then miss: request 0 copies X once; request 1's hit copies nothing, its miss once
    assert _scenario("hit_then_miss", patched=True, entry="by_item").copies == [1, 1]
    # miss then miss: X misses in a chunk that is not its last (both ranks copy it), Y once
    assert _scenario("miss_then_miss", patched=True, entry="by_item").copies == [3]
    assert _scenario("hit_only", patched=True, entry="by_item").copies == [1, 0]


def test_backport_marker_without_scheduler_encoder_dp(sim):
    """What the stricter deferral check guards: a marked item reaching a scheduler whose
    model runs without encoder DP is reconstructed eagerly, and every slot is released."""
    if sim["version"] not in NEEDS_IT:
        pytest.skip("backport releases only")
    requests = [_ipc_sim.distinct_images_request(4, 2)]
    reference = _ipc_sim.run_requests(requests, patched=False, encoder_dp=False)
    REGISTRY.apply(engine="sglang")
    run = _ipc_sim.run_requests(requests, patched=True, encoder_dp=False, tokenizer_dp=True)
    assert [s.released for s in run.slots] == [1, 1] and _same(reference, run)


# upstream (0.5.17): what the release itself does; a change here means upstream changed


def _upstream(sim):
    if sim["version"] in NEEDS_IT:
        pytest.skip("upstream releases only")


def test_upstream_hit_then_miss_reads_a_recycled_slot_on_the_per_request_path(sim):
    _upstream(sim)
    reference = _scenario("hit_then_miss", patched=False, entry="by_item", encoder_dp=False)
    run = _scenario("hit_then_miss", patched=True, entry="by_item")
    assert _facts(run)["stale_reads"] == 1 and not _same(reference, run)


def test_upstream_hit_then_miss_is_safe_on_the_batched_path_because_hits_never_release(sim):
    _upstream(sim)
    reference = _scenario("hit_then_miss", patched=False, entry="prefill", encoder_dp=False)
    run = _scenario("hit_then_miss", patched=True, entry="prefill")
    assert _facts(run)["stale_reads"] == 0 and _same(reference, run)


def test_upstream_batched_path_leaks_the_slot_of_a_cache_hit(sim):
    _upstream(sim)
    run = _scenario("hit_only", patched=True, entry="prefill")
    assert [s.released for s in run.slots] == [1, 0]  # request 1's slot is never recycled
    assert [s.released for s in _scenario("hit_only", patched=True, entry="by_item").slots] == [
        1, 1]


@pytest.mark.parametrize("entry", ENTRIES)
def test_upstream_miss_then_miss_reads_a_recycled_slot_and_releases_it_twice(sim, entry):
    _upstream(sim)
    reference = _scenario("miss_then_miss", patched=False, entry=entry, encoder_dp=False)
    run = _scenario("miss_then_miss", patched=True, entry=entry)
    facts = _facts(run)
    assert facts["stale_reads"] == 1 and facts["released"][0] == 2 and not _same(reference, run)


def test_upstream_marker_without_scheduler_encoder_dp_never_frees_the_slot(sim):
    _upstream(sim)
    requests = [_ipc_sim.distinct_images_request(4, 2)]
    run = _ipc_sim.run_requests(requests, patched=True, encoder_dp=False, tokenizer_dp=True,
                                entry="prefill")
    assert [float(s.flag[0]) for s in run.slots] == [16.0, 16.0]  # tp * tp, recycler waits for tp
    assert [s.released for s in run.slots] == [0, 0]
