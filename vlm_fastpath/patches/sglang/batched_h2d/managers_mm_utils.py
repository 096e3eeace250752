"""Patches of ``sglang.srt.managers.mm_utils`` (multimodal embedding scheduling).

sglang-batched-feature-h2d
    Why: before the vision tower runs, SGLang moves every multimodal item's feature to the GPU
    one item at a time (``_move_items_to_device``: ``item.feature.to(device, non_blocking=True)``
    per item, from pageable memory, so each copy is effectively synchronous), and the model then
    concatenates the device copies. Kimi K2.5/K2.7/K3 and Qwen2.5-VL/Qwen3-VL/Qwen3.5 (+MoE)
    concatenate every item's feature anyway, so one copy is enough.
    How: the call sites (``_get_chunked_embedding_full``, ``_get_chunked_embedding_by_item``,
    ``_batch_encode_per_image_misses``) are wrapped to publish the embedding function they were
    given; ``_move_items_to_device`` then, for those models only, stages every host feature in
    one (pinned, when CUDA is available) host buffer and does one ``non_blocking=True`` copy,
    handing each item a view of the device buffer. Where the release's own
    ``_can_skip_pre_embed_feature_move`` already lists the model, SGLang's own skip is kept
    (also on the 0.5.13-0.5.15 call site that forgot to consult it). Other models: unchanged.
    Upstream: sglang PR #26167 (0.5.13, Qwen3-VL/Qwen3.5 only), KimiK25 added in 0.5.16, KimiK3
    in 0.5.18, skip check moved into ``_move_items_to_device(items, device, func)`` in 0.5.21.
    Applies to: sglang 0.5.12 - 0.5.17 (the call sites live in ``mm_utils`` up to 0.5.17);
    stands aside ("upstream") when ``_move_items_to_device`` takes the embedding function.

sglang-vectorized-mm-grid-counts
    Why: ``get_new_expanded_mm_items`` splits a bundled multi-image item with one
    ``torch.prod(grid).item()`` per image (and per video two), each a tiny tensor op.
    How: one ``torch.prod(grid, dim=-1).tolist()`` per bundled item and plain-list prefix sums;
    the slicing itself reuses the release's own helpers, so the items produced are identical.
    Upstream: sglang PR #26167 (0.5.13). Applies to: sglang <= 0.5.12.post1; stands aside when
    the release's function already uses ``dim=-1`` products. ``embed_mm_inputs`` (a CPU
    ``torch.zeros``+``cumsum`` over requests, no device sync) is left as it is.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from itertools import accumulate
from typing import Any

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register
from .._common import (
    BATCHED_FEATURE_MODELS,
    SGLANG_PREFIXES,
    cuda_available,
    module,
    owner_class_name,
    require,
    source_of,
)

MM_UTILS = "sglang.srt.managers.mm_utils"
CALL_SITES = (
    "_get_chunked_embedding_full",
    "_get_chunked_embedding_by_item",
    "_batch_encode_per_image_misses",  # 0.5.16+
)

# The embedding function of the call site currently running (per thread / task).
_CURRENT_EMBEDDER: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "vlm_fastpath_sglang_embedder", default=None
)


def _move_function():
    """The release's ``_move_items_to_device`` (``mm_schedule`` from 0.5.18)."""
    import importlib.util

    if importlib.util.find_spec("sglang.srt.managers.mm_schedule") is not None:
        sched = module("sglang.srt.managers.mm_schedule")
        if hasattr(sched, "_move_items_to_device"):
            return sched._move_items_to_device
    return getattr(module(MM_UTILS), "_move_items_to_device", None)


def batched_move_to_device(items: list[Any], device: Any) -> int:
    """Move every host tensor feature of ``items`` to ``device`` with one copy per dtype/shape.

    Features are staged in one host buffer (page-locked when CUDA is available, so the
    ``non_blocking`` copy really is asynchronous) and each item gets a view of the device
    buffer. Returns the number of host-to-device copies issued.
    """
    import torch

    target = torch.device(device)
    groups: dict[tuple[Any, ...], list[Any]] = {}
    copies = 0
    for item in items:
        feature = getattr(item, "feature", None)
        if not isinstance(feature, torch.Tensor) or feature.device == target:
            continue
        if feature.device.type != "cpu" or feature.dim() == 0:
            item.feature = feature.to(target, non_blocking=True)
            copies += 1
            continue
        groups.setdefault((feature.dtype, tuple(feature.shape[1:])), []).append(item)
    pin = target.type == "cuda" and cuda_available()
    for (dtype, tail), members in groups.items():
        sizes = [int(item.feature.shape[0]) for item in members]
        staging = torch.empty((sum(sizes), *tail), dtype=dtype, pin_memory=pin)
        torch.cat([item.feature for item in members], dim=0, out=staging)
        on_device = staging.to(target, non_blocking=True)
        copies += 1
        for item, view in zip(members, on_device.split(sizes, dim=0), strict=True):
            item.feature = view
    return copies


@register
class BatchedFeatureH2DPatch(Patch):
    name = "sglang-batched-feature-h2d"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.18"
    trigger = MM_UTILS
    modules = (MM_UTILS,)
    upstream_pr = "sgl-project/sglang#26167"
    summary = (
        "one pinned, non-blocking host-to-device copy of all multimodal features for "
        "Kimi K2.5/K3 and Qwen2.5-VL/Qwen3-VL/Qwen3.5 instead of one copy per item"
    )

    def upstream_equivalent(self) -> str | None:
        move = _move_function()
        if move is None:
            return "sglang has no _move_items_to_device: feature moves are the model's own"
        if "data_embedding_func" in inspect.signature(move).parameters:
            return "_move_items_to_device(items, device, data_embedding_func) skips per model"
        return None

    def not_needed(self) -> str | None:
        skip = getattr(module(MM_UTILS), "_can_skip_pre_embed_feature_move", None)
        if skip is None:
            return None
        text = source_of(skip)
        if all(name in text for name in BATCHED_FEATURE_MODELS):
            return "_can_skip_pre_embed_feature_move already covers every model"
        return None

    def apply(self, ctx: PatchContext) -> None:
        mm_utils = module(MM_UTILS)
        require(mm_utils, "_move_items_to_device", *CALL_SITES[:2])
        original_move = mm_utils._move_items_to_device
        upstream_skip = getattr(mm_utils, "_can_skip_pre_embed_feature_move", None)

        # Re-running the original after a fault is safe: features already moved are on the
        # device, and the release's per-item ``.to(device)`` leaves those as they are.
        @contained(self.name, original_move)
        @functools.wraps(original_move)
        def _move_items_to_device(items, device, *args, **kwargs):
            embedder = _CURRENT_EMBEDDER.get()
            model = owner_class_name(embedder)
            if model is None or model not in BATCHED_FEATURE_MODELS or args or kwargs:
                return original_move(items, device, *args, **kwargs)
            if upstream_skip is not None and upstream_skip(embedder):
                return None  # the release's own batched path: the model moves them
            batched_move_to_device(items, device)
            return None

        ctx.set_attr(mm_utils, "_move_items_to_device", _move_items_to_device)
        ctx.rebind_globals(original_move, _move_items_to_device, SGLANG_PREFIXES)

        for site_name in CALL_SITES:
            original_site = getattr(mm_utils, site_name, None)
            if original_site is None:
                continue
            wrapped = _publishing_embedder(original_site)
            ctx.set_attr(mm_utils, site_name, wrapped)
            ctx.rebind_globals(original_site, wrapped, SGLANG_PREFIXES)


def _publishing_embedder(original):
    @functools.wraps(original)
    def call_site(data_embedding_func, *args, **kwargs):
        token = _CURRENT_EMBEDDER.set(data_embedding_func)
        try:
            return original(data_embedding_func, *args, **kwargs)
        finally:
            _CURRENT_EMBEDDER.reset(token)

    return call_site


# -- vectorized grid counting ---------------------------------------------------------------


def _grid_rows(grid: Any) -> list[list[int]] | None:
    """Each row of a grid (tensor, ndarray or nested list) as ints, in one conversion."""
    import numpy as np
    import torch

    if isinstance(grid, torch.Tensor):
        if grid.dim() == 0:
            return None
        return grid.reshape(grid.shape[0], -1).to(torch.long).tolist()
    if isinstance(grid, np.ndarray):
        if grid.ndim == 0:
            return None
        return grid.reshape(grid.shape[0], -1).astype(np.int64).tolist()
    rows = []
    for row in grid:
        if isinstance(row, torch.Tensor):
            rows.append([int(v) for v in row.reshape(-1).tolist()])
        else:
            rows.append([int(v) for v in np.asarray(row).reshape(-1).tolist()])
    return rows


def _row_products(grid: Any) -> list[int] | None:
    """``prod(row)`` of every grid row: one vectorized product for tensors."""
    import torch

    if isinstance(grid, torch.Tensor) and grid.dim() > 0:
        return torch.prod(grid.reshape(grid.shape[0], -1).to(torch.long), dim=-1).tolist()
    rows = _grid_rows(grid)
    if rows is None:
        return None
    out = []
    for row in rows:
        product = 1
        for value in row:
            product *= value
        out.append(product)
    return out


def _make_expand(mm_utils):
    """``get_new_expanded_mm_items`` with list arithmetic; slicing via the release's helpers."""
    import copy

    g = mm_utils.__dict__  # read helpers at call time (hooks may rebind them)

    def _feature_len(item):
        length = g["_get_length"](item.feature)
        if length is None:
            length = g["_get_length"](item.precomputed_embeddings)
        return length

    def _emit(item, start, end, offsets, index, num_items, total, out):
        new_item = copy.copy(item)
        if item.feature is not None:
            new_item.feature = g["_slice_value"](item.feature, start, end)
        if item.precomputed_embeddings is not None:
            new_item.precomputed_embeddings = g["_slice_value"](
                item.precomputed_embeddings, start, end
            )
        new_item.offsets = offsets
        new_item.model_specific_data = g["_slice_model_data"](
            item.model_specific_data,
            index=index,
            start=start,
            end=end,
            num_items=num_items,
            total_feature_len=total,
        )
        new_item.hash = None
        out.append(new_item)

    def _split_or_keep(item, num_items, out):
        if not g["_try_simple_split"](item, num_items, out):
            out.append(item)

    def get_new_expanded_mm_items(original_mm_items):
        expanded = []
        for item in original_mm_items:
            if item.offsets is None or len(item.offsets) <= 1:
                expanded.append(item)
                continue
            num_items = len(item.offsets)
            if item.is_image():
                grid = item.model_specific_data.get("image_grid_thw")
                if grid is None or g["_get_length"](grid) != num_items:
                    _split_or_keep(item, num_items, expanded)
                    continue
                bounds = [0, *accumulate(_row_products(grid))]
                total = _feature_len(item)
                if total is None or bounds[-1] != total:
                    expanded.append(item)
                    continue
                for i in range(num_items):
                    _emit(
                        item, bounds[i], bounds[i + 1], [item.offsets[i]], i, num_items,
                        total, expanded,
                    )
            elif item.is_video():
                grid = item.model_specific_data.get("video_grid_thw")
                if grid is None:
                    _split_or_keep(item, num_items, expanded)
                    continue
                rows = _grid_rows(grid)
                frames = [row[0] for row in rows]
                if num_items != sum(frames):
                    expanded.append(item)
                    continue
                bounds = [0, *accumulate(_row_products(grid))]
                total = _feature_len(item)
                if total is None or bounds[-1] != total:
                    expanded.append(item)
                    continue
                frame_bounds = [0, *accumulate(frames)]
                num_videos = len(rows)
                for v in range(num_videos):
                    offsets = item.offsets[frame_bounds[v] : frame_bounds[v + 1]]
                    _emit(
                        item, bounds[v], bounds[v + 1], offsets, v, num_videos, total,
                        expanded,
                    )
            else:
                _split_or_keep(item, num_items, expanded)
        return expanded

    return get_new_expanded_mm_items


@register
class VectorizedGridCountsPatch(Patch):
    name = "sglang-vectorized-mm-grid-counts"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = MM_UTILS
    modules = (MM_UTILS,)
    upstream_pr = "sgl-project/sglang#26167"
    summary = "get_new_expanded_mm_items counts patches with one vectorized product per item"

    def upstream_equivalent(self) -> str | None:
        mm_utils = module(MM_UTILS)
        expand = getattr(mm_utils, "get_new_expanded_mm_items", None)
        if expand is None:
            return "sglang has no get_new_expanded_mm_items"
        text = source_of(expand)
        if ".item()" not in text:
            return "get_new_expanded_mm_items already counts grids without per-row .item()"
        return None

    def apply(self, ctx: PatchContext) -> None:
        mm_utils = module(MM_UTILS)
        require(
            mm_utils,
            "get_new_expanded_mm_items",
            "_get_length",
            "_slice_value",
            "_slice_model_data",
            "_try_simple_split",
        )
        original = mm_utils.get_new_expanded_mm_items
        # Builds new items only (the originals are copied, never changed): the original may
        # answer a call that faulted.
        replacement = contained(self.name, original)(
            functools.wraps(original)(_make_expand(mm_utils))
        )
        ctx.set_attr(mm_utils, "get_new_expanded_mm_items", replacement)
        ctx.rebind_globals(original, replacement, SGLANG_PREFIXES)
