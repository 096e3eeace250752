"""SGLang Qwen2/2.5/3-VL models: compact image items are expanded before ``get_image_feature``.

One patch per model module. The wrapper reads the geometry from the model's own tower
(``self.visual.patch_embed``): an image item's feature is compact exactly when it is a 2-D
tensor ``C*P*P`` wide, for a tower with ``T > 1``, with one row per patch of its grid (so a
precomputed embedding of that width, one row per merged token, is never taken for one). The
compact features of a call go to the tower's device in one copy and are expanded there; each
item holds the full rows for the release's own ``get_image_feature`` (its width checks, its
concatenation, its encoder-DP loader) and its compact feature again afterwards. Under encoder
DP the expansion stays where the feature is (only the owner rank moves an image to its
device).
"""

from __future__ import annotations

import functools
from typing import Any

from ...adapters.qwen_tower import embed_clause
from ...core.base import Patch, PatchContext, signature_clause, source_text
from ...core.registry import register
from .._common import module

VERSIONS = ">=0.5.12"


def _rows_of(item: Any) -> int | None:
    """Patches in an image item's grid, or None where it has no readable grid."""
    data = getattr(item, "model_specific_data", None) or {}
    grid = data.get("image_grid_thw")
    if grid is None:
        return None
    try:
        return int(grid.reshape(-1, 3).prod(-1).sum())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def expand_items(model: Any, items: Any) -> list[tuple[Any, Any, Any]]:
    """Give every compact image item of ``items`` its full rows; returns ``(item, compact
    feature, full feature)`` of each, so that the caller can put the compact one back."""
    import torch

    from vlm_fastpath.qwen_integration import compact

    try:
        channels, temporal, patch = compact.geometry(model.visual)
    except (AttributeError, TypeError, ValueError):
        return []  # no tower of that shape (a language-only checkpoint): the release decides
    if temporal < 2:
        return []
    found = [item for item in items
             if isinstance(getattr(item, "feature", None), torch.Tensor)
             and compact.is_compact(item.feature, channels, temporal, patch)
             and item.feature.shape[0] == _rows_of(item)]
    if not found:
        return []
    if getattr(model, "use_data_parallel", False):
        # the encoder-DP loader moves only the owner rank's images: expand where they are
        return [_swap(item, compact.expand(item.feature, channels, temporal, patch))
                for item in found]
    # one copy of every compact item's rows to the tower's device (nothing moves where they
    # are there already), expanded there, then handed back per item
    device = model.visual.patch_embed.proj.weight.device
    features = [item.feature for item in found]
    if len({feature.device for feature in features}) > 1:  # some moved already: each goes
        features = [feature.to(device=device, non_blocking=True) for feature in features]
    rows = torch.cat(features) if len(features) > 1 else features[0]
    full = compact.expand(rows.to(device=device, non_blocking=True), channels, temporal, patch)
    done, start = [], 0
    for item in found:
        count = item.feature.shape[0]
        done.append(_swap(item, full[start:start + count]))
        start += count
    return done


def _swap(item: Any, full: Any) -> tuple[Any, Any, Any]:
    kept = item.feature
    item.feature = full
    return item, kept, full


def restore(swapped: list[tuple[Any, Any, Any]]) -> None:
    """Each item's compact feature back, unless the release replaced the full one meanwhile
    (the full rows live only for the call: an item kept for a later chunk holds no device
    copy of twice its bytes)."""
    for item, kept, full in swapped:
        if item.feature is full:
            item.feature = kept


def make_get_image_feature(original: Any) -> Any:
    """``get_image_feature`` taking compact items too (no containment: the release's own
    function would read compact rows wrongly, so there is nothing to fall back to)."""

    @functools.wraps(original)
    def get_image_feature(self: Any, items: Any, *args: Any, **kwargs: Any) -> Any:
        swapped = expand_items(self, items)
        try:
            return original(self, items, *args, **kwargs)
        finally:
            restore(swapped)

    get_image_feature.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return get_image_feature


class ModelExpansionPatch(Patch):
    """Wrap ``<MODEL>.get_image_feature`` of one module."""

    engine = "sglang"
    versions = VERSIONS
    backport = False
    upstream_pr = "vllm-project/vllm#44787"
    model: str
    embed: str
    stays_when_faulted = ("compact items already sent by the tokenizer process are read only "
                          "by the expansion: it stays for the life of the process")

    def not_needed(self) -> str | None:
        if getattr(module(self.trigger), self.model, None) is None:
            return f"{self.trigger} has no {self.model}"
        return None

    def contract(self) -> str | None:
        mod = module(self.trigger)
        model = getattr(mod, self.model)
        clause = signature_clause(model, "get_image_feature", ("self", "items"))
        if clause:
            return clause
        if "self.visual" not in source_text(model.__init__):
            return f"structure: {self.model}.__init__ does not build self.visual"
        return embed_clause(mod, self.embed)

    def apply(self, ctx: PatchContext) -> None:
        model = getattr(module(self.trigger), self.model)
        original = model.__dict__.get("get_image_feature")
        if not callable(original):
            raise LookupError(f"{self.model}.get_image_feature is not defined on the class")
        ctx.set_attr(model, "get_image_feature", make_get_image_feature(original))


@register
class Qwen2VLModelPatch(ModelExpansionPatch):
    name = "sglang-qwen2-vl-compact-rows"
    trigger = "sglang.srt.models.qwen2_vl"
    modules = (trigger,)
    model = "Qwen2VLForConditionalGeneration"
    embed = "Qwen2VisionPatchEmbed"
    summary = "Qwen2-VL image items expand compact rows before the tower (torch.equal)"


@register
class Qwen25VLModelPatch(ModelExpansionPatch):
    name = "sglang-qwen2-5-vl-compact-rows"
    trigger = "sglang.srt.models.qwen2_5_vl"
    modules = (trigger,)
    model = "Qwen2_5_VLForConditionalGeneration"
    embed = "Qwen2_5_VisionPatchEmbed"
    # outermost: the owner-only wrapper (0.5.12-0.5.15.post1) reads the rows' width
    after = ("sglang-qwen2-5-vl-encoder-dp-owner-only",)
    summary = "Qwen2.5-VL image items expand compact rows before the tower (torch.equal)"


@register
class Qwen3VLModelPatch(ModelExpansionPatch):
    name = "sglang-qwen3-vl-compact-rows"
    trigger = "sglang.srt.models.qwen3_vl"
    modules = (trigger,)
    model = "Qwen3VLForConditionalGeneration"
    embed = "Qwen3VLVisionPatchEmbed"
    after = ("sglang-qwen3-vl-encoder-dp-owner-only",)
    summary = ("Qwen3-VL (and Qwen3-VL-MoE, its subclass) image items expand compact rows "
               "before the tower (torch.equal)")
