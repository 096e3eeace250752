"""Host-to-device copies before the vision tower, through the release's real call sites."""

from __future__ import annotations

import itertools

import pytest
import torch

from fixtures import sglang_cpu as _testing
from vlm_fastpath.patches import REGISTRY

DEVICE = torch.device("meta")  # the stand-in accelerator (mapped to the CPU by the recorder)
_hashes = itertools.count(1_000_003)


class _Model:
    """Encoders like the real ones: concatenate every item's feature, one move to the device."""

    def get_image_feature(self, items):
        x = torch.cat([item.feature for item in items], dim=0).to(DEVICE, dtype=torch.float32)
        return x * 2.0 + 1.0

    get_video_feature = get_image_feature


def model_named(name):
    return type(name, (_Model,), {})()


def make_items(sizes, seed=0, dim=12):
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

    gen = torch.Generator().manual_seed(seed)
    items, offsets, start = [], [], 0
    for n in sizes:
        item = _testing.make_item(
            MultimodalDataItem, Modality.IMAGE, torch.randn(n, dim, generator=gen), {}
        )
        item.hash = next(_hashes)
        item.pad_value = item.hash % (1 << 30)
        item.offsets = [(start, start + n - 1)]
        items.append(item)
        offsets.append((start, start + n - 1))
        start += n
    return items, offsets


def encode(site, model, sizes, seed=0):
    import sglang.srt.managers.mm_utils as mm_utils

    if not hasattr(mm_utils, "_get_chunked_embedding_full"):
        pytest.skip("call sites moved to mm_schedule (0.5.18+): the patch stands aside there")

    mm_utils.init_mm_embedding_cache(1 << 30)
    items, offsets = make_items(sizes, seed)
    total = sum(sizes)
    input_ids = torch.zeros(total, dtype=torch.long)
    recorder = _testing.TransferRecorder()
    with recorder:
        if site == "full":
            out, _ = mm_utils._get_chunked_embedding_full(
                model.get_image_feature, items, offsets, 0, total, input_ids, DEVICE
            )
        else:
            out = mm_utils._get_chunked_embedding_by_item(
                model.get_image_feature, items, offsets, 0, total, DEVICE
            )
    return out, recorder


TARGETS = [
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
]
SIZES = [16, 24, 8, 40]


@pytest.mark.parametrize("site", ["full", "by_item"])
@pytest.mark.parametrize("name", TARGETS)
def test_one_batched_copy_for_target_models(engine, site, name):
    import sglang.srt.managers.mm_utils as mm_utils

    model = model_named(name)
    REGISTRY.revert(engine="sglang")
    before, rec_before = encode(site, model, SIZES)
    results = {r.name: r for r in REGISTRY.apply(engine="sglang")}
    try:
        after, rec_after = encode(site, model, SIZES)
    finally:
        REGISTRY.revert(engine="sglang")
    assert torch.equal(before, after)
    skip = getattr(mm_utils, "_can_skip_pre_embed_feature_move", None)
    upstream_skips = skip is not None and skip(model.get_image_feature)
    if results["sglang-batched-feature-h2d"].status.value != "applied":
        assert len(rec_after.h2d) == len(rec_before.h2d)
        return
    assert len(rec_after.h2d) == 1, rec_after.h2d
    if not upstream_skips:
        assert len(rec_before.h2d) == len(SIZES)
        assert rec_after.h2d[0].non_blocking
        assert rec_after.h2d[0].nbytes == sum(SIZES) * 12 * 4
        assert rec_after.h2d[0].pinned == torch.cuda.is_available()


def test_other_models_unchanged(engine):
    model = model_named("LlavaForConditionalGeneration")
    REGISTRY.revert(engine="sglang")
    before, rec_before = encode("full", model, SIZES)
    REGISTRY.apply(engine="sglang")
    try:
        after, rec_after = encode("full", model, SIZES)
    finally:
        REGISTRY.revert(engine="sglang")
    assert torch.equal(before, after)
    assert len(rec_before.h2d) == len(rec_after.h2d)


def test_batched_move_mixed_shapes():
    from vlm_fastpath.patches.sglang.batched_h2d.managers_mm_utils import batched_move_to_device

    class Item:
        def __init__(self, feature):
            self.feature = feature

    items = [Item(torch.ones(2, 3)), Item(torch.zeros(4, 3)), Item(torch.ones(1, 5)),
             Item(None), Item(torch.ones(2, 3, dtype=torch.float16))]
    expected = [None if i.feature is None else i.feature.clone() for i in items]
    recorder = _testing.TransferRecorder()
    with recorder:
        copies = batched_move_to_device(items, DEVICE)
    assert copies == 3 and len(recorder.h2d) == 3
    for item, want in zip(items, expected, strict=True):
        if want is None:
            assert item.feature is None
        else:
            assert torch.equal(item.feature, want) and recorder.on_device(item.feature)
