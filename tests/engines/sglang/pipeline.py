"""The release's own multimodal item pipeline, as the scheduler runs it, for deferral tests."""

from __future__ import annotations

import pickle


def release_items(processor_cls, out, token_id: int):
    """Collect items from processor output, set offsets, split per image, set pad values and
    pickle round trip (what crosses to the scheduler). Returns (items, input_ids)."""
    from sglang.srt.managers.mm_utils import get_new_expanded_mm_items
    from sglang.srt.managers.schedule_batch import Modality

    obj = processor_cls.__new__(processor_cls)
    obj.ATTR_NAME_TO_MODALITY = {"pixel_values": Modality.IMAGE,
                                 "image_grid_thw": Modality.IMAGE}
    obj.FEATURE_NAMES = ["pixel_values"]
    input_ids = out["input_ids"].flatten()
    items = obj.collect_mm_items_from_processor_output(out)
    for item in items:
        item.offsets = processor_cls.get_mm_items_offset(input_ids=input_ids,
                                                         mm_token_id=token_id)
    items = get_new_expanded_mm_items(items)
    for item in items:
        item.set_pad_value()
    return pickle.loads(pickle.dumps(items)), input_ids
