"""Kimi K2.5 under encoder DP at attention-TP sizes 1, 2 and 8: the real MoonViT on the CPU.

The release's ``run_dp_sharded_mrope_vision_model`` and ``KimiK25ForConditionalGeneration``
with the tiny MoonViT of ``fixtures/sglang_cpu.py`` (FA3 forced, reference kernel); TP
ranks are threads of ``fixtures/ipc_sim.Cluster`` (real all-gather across them). Every
rank's embeddings must be ``torch.equal`` to the non-DP path's.
"""

from __future__ import annotations

import pytest
import torch

from fixtures import ipc_sim as _ipc_sim
from fixtures import sglang_cpu as _testing
from vlm_fastpath.patches import REGISTRY

NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")
GRIDS = [(1, 4, 4), (1, 8, 6), (1, 6, 6), (1, 4, 8), (1, 2, 2)]


@pytest.fixture
def model(engine, kimi_model):
    if engine["version"] not in NEEDS_IT:
        pytest.skip(f"sglang {engine['version']} has #31227 upstream")
    REGISTRY.revert(engine="sglang")
    yield kimi_model
    kimi_model.use_data_parallel = False
    REGISTRY.revert(engine="sglang")


def _non_dp(model):
    model.use_data_parallel = False
    with _testing.fa3_stub(None), torch.no_grad():
        return model.get_image_feature(_testing.kimi_items(GRIDS))


def _dp(model, tp):
    model.use_data_parallel = True
    cluster = _ipc_sim.Cluster(tp)

    def work(rank):
        with torch.no_grad():
            return model.get_image_feature(_testing.kimi_items(GRIDS))

    with _testing.fa3_stub(None):
        return cluster.run(work), cluster


def test_release_fails_at_attention_tp_1(model):
    """What the patches fix: the release calls MoonViT with ``grid_thw=``."""
    _non_dp(model)  # warm-up: rope tables are built lazily
    with pytest.raises(TypeError, match="grid_thw"):
        _dp(model, 1)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_encoder_dp_equals_non_dp(model, tp):
    reference = _non_dp(model)
    REGISTRY.apply(engine="sglang")
    outputs, cluster = _dp(model, tp)
    assert len(outputs) == tp
    for out in outputs:
        assert out.shape == reference.shape
        assert torch.equal(out, reference)
    counts = [cluster.gathers.count(rank) for rank in range(tp)]
    assert len(set(counts)) == 1  # every rank joined the same collectives (none at TP 1)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_release_kimi_code_with_the_dp_loader_only(model, tp):
    """The release's own ``get_image_feature`` (pixel values, "rope_2d") with only the DP
    loader applied: also fixed at attention-TP size 1."""
    reference = _non_dp(model)
    REGISTRY.apply(engine="sglang", patches=["sglang-encoder-dp-local-loader"])
    outputs, _ = _dp(model, tp)
    assert all(torch.equal(out, reference) for out in outputs)
