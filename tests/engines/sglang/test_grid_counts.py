"""get_new_expanded_mm_items: identical items with the vectorized counting (<= 0.5.12.post1)."""

from __future__ import annotations

import numpy as np
import torch

from fixtures import sglang_cpu as _testing
from vlm_fastpath.patches import REGISTRY


def bundled_items():
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

    grids = torch.tensor([[1, 4, 4], [1, 2, 6], [1, 6, 2]])
    n = int(grids.prod(-1).sum())
    image = _testing.make_item(MultimodalDataItem, Modality.IMAGE, torch.randn(n, 8),
                               {"image_grid_thw": grids})
    image.offsets = [(0, 3), (10, 12), (20, 22)]
    image_list = _testing.make_item(MultimodalDataItem, Modality.IMAGE, torch.randn(n, 8),
                                    {"image_grid_thw": [g.tolist() for g in grids]})
    image_list.offsets = [(0, 3), (10, 12), (20, 22)]
    vgrid = np.array([[2, 2, 2], [1, 2, 4]])
    video = _testing.make_item(MultimodalDataItem, Modality.VIDEO, torch.randn(16, 8),
                               {"video_grid_thw": torch.as_tensor(vgrid)})
    video.offsets = [(0, 1), (2, 3), (4, 5)]
    bad = _testing.make_item(MultimodalDataItem, Modality.IMAGE, torch.randn(5, 8),
                             {"image_grid_thw": grids})
    bad.offsets = [(0, 1), (2, 3), (4, 4)]
    single = _testing.make_item(MultimodalDataItem, Modality.IMAGE, torch.randn(4, 8), {})
    single.offsets = [(0, 3)]
    return [image, image_list, video, bad, single]


def describe(items):
    out = []
    for item in items:
        data = {k: (v.tolist() if hasattr(v, "tolist") else v)
                for k, v in item.model_specific_data.items()}
        out.append((str(item.modality), item.feature.tolist(), list(item.offsets), data))
    return out


def test_identical_expansion(engine):
    import sglang.srt.managers.mm_utils as mm_utils

    REGISTRY.revert(engine="sglang")
    torch.manual_seed(0)
    before = describe(mm_utils.get_new_expanded_mm_items(bundled_items()))
    REGISTRY.apply(engine="sglang")
    try:
        torch.manual_seed(0)
        after = describe(mm_utils.get_new_expanded_mm_items(bundled_items()))
    finally:
        REGISTRY.revert(engine="sglang")
    assert before == after
    assert len(before) >= 7
