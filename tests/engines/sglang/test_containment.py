"""Fault injection per patch family: a fast path that raises is answered by the release's code.

On each release where the family applies, a ``RuntimeError`` is injected inside our fast path
(never inside the release's own function); the result must equal the unpatched release's, the
fault is counted for the right patch, and after ``VLM_FASTPATH_FAULT_LIMIT`` faults the patch
reports ``faulted``. Families: batched H2D (+ grid counts), MoonViT/vision ``max_seqlen``, IPC
deferral, the Kimi CPU processor, deferred preprocessing (sender and owner).
"""

from __future__ import annotations

import pickle

import pytest
import torch

from fixtures import ipc_sim as _ipc_sim
from fixtures.reference_kimi import ref_preprocess
from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.core import containment

from . import test_deferred_kimi_k25 as deferred_k25
from .test_grid_counts import bundled_items, describe
from .test_kimi_processor import MEDIA_CFG, make_wrapper
from .test_mm_utils_h2d import SIZES, encode, model_named
from .test_moonvit_syncs import GRIDS
from .test_moonvit_syncs import run_forward as moonvit_forward


def _boom(*_args, **_kwargs):
    raise RuntimeError("injected fault in the fast path")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "100000")
    containment.reset()
    yield
    containment.reset()
    REGISTRY.clear_faults()
    REGISTRY.revert(engine="sglang")


def _applied(*names: str) -> dict[str, str]:
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    missing = [n for n in names if results.get(n) != "applied"]
    if missing:
        REGISTRY.revert(engine="sglang")
        pytest.skip(f"{', '.join(missing)} not applied here: {[results.get(n) for n in missing]}")
    return results


def _status(name: str) -> str:
    return next(r.status.value for r in REGISTRY.status("sglang") if r.name == name)


# -- H2D -------------------------------------------------------------------------------------
def test_batched_h2d_fault(engine, monkeypatch):
    from vlm_fastpath.patches.sglang.batched_h2d import managers_mm_utils as ours

    model = model_named("Qwen2_5_VLForConditionalGeneration")  # no release skips its move
    REGISTRY.revert(engine="sglang")
    before, rec_before = encode("full", model, SIZES)
    _applied("sglang-batched-feature-h2d")
    monkeypatch.setattr(ours, "batched_move_to_device", _boom)
    after, rec_after = encode("full", model, SIZES)
    assert torch.equal(before, after)
    assert len(rec_after.h2d) == len(rec_before.h2d)  # the release's per-item copies
    assert containment.LEDGER.counts == {"sglang-batched-feature-h2d": 1}
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "2")
    again, _ = encode("full", model, SIZES)
    assert torch.equal(before, again)
    assert _status("sglang-batched-feature-h2d") == "faulted"


def test_grid_counts_fault(engine, monkeypatch):
    import sglang.srt.managers.mm_utils as mm_utils

    from vlm_fastpath.patches.sglang.batched_h2d import managers_mm_utils as ours

    REGISTRY.revert(engine="sglang")
    torch.manual_seed(0)
    before = describe(mm_utils.get_new_expanded_mm_items(bundled_items()))
    _applied("sglang-vectorized-mm-grid-counts")
    monkeypatch.setattr(ours, "_row_products", _boom)
    torch.manual_seed(0)
    after = describe(mm_utils.get_new_expanded_mm_items(bundled_items()))
    assert before == after
    assert containment.LEDGER.counts == {"sglang-vectorized-mm-grid-counts": 1}


# -- max_seqlen ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "patch"),
    [("models_kimi_k25._host_grid", "sglang-moonvit-max-seqlen-once"),
     ("layers_attention_vision._host_max_seqlen", "sglang-vision-host-max-seqlen")],
)
def test_max_seqlen_fault(engine, kimi_model, monkeypatch, target, patch):
    import importlib

    from fixtures import sglang_cpu as _testing

    module_name, attr = target.split(".")
    ours = importlib.import_module(f"vlm_fastpath.patches.sglang.vision_max_seqlen.{module_name}")
    items = _testing.kimi_items(GRIDS)
    REGISTRY.revert(engine="sglang")
    moonvit_forward(kimi_model, items)
    before, _ = moonvit_forward(kimi_model, items)
    _applied(patch)
    monkeypatch.setattr(ours, attr, _boom)
    after, _ = moonvit_forward(kimi_model, items)
    assert torch.equal(before, after)
    assert containment.LEDGER.counts.get(patch, 0) >= 1
    monkeypatch.setenv("VLM_FASTPATH_FAULT_LIMIT", "1")
    moonvit_forward(kimi_model, items)
    assert _status(patch) == "faulted"
    reverted, _ = moonvit_forward(kimi_model, items)
    assert torch.equal(before, reverted)


# -- IPC deferral ----------------------------------------------------------------------------
def test_ipc_deferral_decision_fault(engine, monkeypatch):
    if engine["version"] not in ("0.5.12.post1", "0.5.15.post1"):
        pytest.skip("deferred IPC reconstruction is upstream here")
    import sglang.srt.managers.schedule_batch as sb

    requests = _ipc_sim.random_requests(12, seed=9, tps=(2, 4))
    REGISTRY.revert(engine="sglang")
    base = _ipc_sim.run_requests(requests, patched=False)
    _applied("sglang-ipc-deferred-reconstruction")
    monkeypatch.setattr(sb.MultimodalDataItem, "can_defer_cuda_ipc_feature_reconstruction", _boom)
    run = _ipc_sim.run_requests(requests, patched=True)
    assert len(run.outputs) == len(base.outputs)
    for got, want in zip(run.outputs, base.outputs, strict=True):
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert run.copies == base.copies  # every rank reconstructed eagerly, as the release does
    assert set(containment.LEDGER.counts) == {"sglang-ipc-deferred-reconstruction"}


# -- processors ------------------------------------------------------------------------------
class _CheckpointProcessor:
    """The checkpoint's media processor: the reference arithmetic."""

    media_proc_cfg = MEDIA_CFG

    def media_tokens_calculator(self, media):
        return ref_preprocess([media], MEDIA_CFG)[2][0]

    def preprocess(self, medias, return_tensors=None):
        pixels, grids, _ = ref_preprocess(medias, MEDIA_CFG)
        return {"pixel_values": pixels, "grid_thws": grids}




def test_kimi_cpu_processor_fault(engine, monkeypatch):
    import numpy as np
    import sglang.srt.multimodal.processors.kimi_k25 as proc
    from PIL import Image

    from tests.engines.sglang import test_kimi_processor as tkp
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    if not hasattr(proc, "KimiGPUProcessorWrapper"):
        pytest.skip("no Kimi CPU preprocessing path in this release")
    monkeypatch.setattr(tkp, "CheckpointMediaProcessor", _CheckpointProcessor)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (61, 90, 3), np.uint8))
    REGISTRY.revert(engine="sglang")
    before = make_wrapper()._cpu_call("a<|media_pad|>b", [image])
    _applied("sglang-kimi-k25-fused-cpu-processor")
    wrapper = make_wrapper()
    assert isinstance(wrapper.media_processor, FusedKimiProcessor)
    # A run-time fault, after the probes handed ours out (a processor that fails them is
    # never handed out: test_kimi_processor's behaviour-clause test).
    monkeypatch.setattr(FusedKimiProcessor, "preprocess", _boom)
    after = wrapper._cpu_call("a<|media_pad|>b", [image])
    assert torch.equal(before["pixel_values"], after["pixel_values"])
    assert torch.equal(before["image_grid_thw"], after["image_grid_thw"])
    assert torch.equal(before["input_ids"], after["input_ids"])
    assert containment.LEDGER.counts == {"sglang-kimi-k25-fused-cpu-processor": 1}
    again = pickle.loads(pickle.dumps(wrapper.media_processor))  # as the checkpoint's pickled
    assert isinstance(again, FusedKimiProcessor)
    assert isinstance(again.engine_processor, _CheckpointProcessor)


# -- deferred preprocessing ------------------------------------------------------------------
def test_deferred_sender_fault_runs_the_release_path(engine, monkeypatch):
    from vlm_fastpath.kimi_integration.deferred import DeferredKimiProcessor

    _applied(deferred_k25.SENDER)
    images = [deferred_k25._images()["png"]]
    prompt = f"x{deferred_k25.TOKEN}"
    wrapper = deferred_k25._wrapper()
    eager = deferred_k25._run(wrapper, monkeypatch, "0", images, prompt)
    monkeypatch.setattr(DeferredKimiProcessor, "prepare", _boom)
    faulted = deferred_k25._run(wrapper, monkeypatch, "1", images, prompt)
    assert "_vlm_fastpath_kimi_deferred" not in faulted
    for key in ("input_ids", "pixel_values", "image_grid_thw"):
        assert torch.equal(eager[key], faulted[key])
    assert containment.LEDGER.counts == {deferred_k25.SENDER: 1}


def test_deferred_owner_fault_uses_the_reference_backend(engine, small_model, monkeypatch):
    from vlm_fastpath.kimi_integration.deferred import DeferredKimiProcessor

    _applied(deferred_k25.SENDER, deferred_k25.OWNER)
    monkeypatch.setenv("VLM_FASTPATH_DEFER_RESIZE", "torch-pillow")
    images = [deferred_k25._images()[k] for k in ("jpeg", "gray")]
    prompt = f"a{deferred_k25.TOKEN}b{deferred_k25.TOKEN}"
    wrapper = deferred_k25._wrapper()
    eager = deferred_k25._run(wrapper, monkeypatch, "0", images, prompt)
    lazy = deferred_k25._run(wrapper, monkeypatch, "1", images, prompt)
    eager_items, _ = deferred_k25._items(eager)
    lazy_items, _ = deferred_k25._items(lazy)
    want, _ = deferred_k25._tower_input(small_model, eager_items)
    monkeypatch.setattr(DeferredKimiProcessor, "_run_device", _boom)
    got, _ = deferred_k25._tower_input(small_model, lazy_items)
    assert torch.equal(want, got)
    assert containment.LEDGER.counts.get(deferred_k25.OWNER, 0) >= 1


@pytest.fixture(scope="module")
def small_model(engine):
    from fixtures import sglang_cpu as _testing

    REGISTRY.revert(engine="sglang")
    try:
        return _testing.build_kimi_k25(num_layers=2)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MoonViT cannot be built outside a server on {engine['version']}: {exc}")
