"""Patch of ``sglang.srt.multimodal.mm_utils`` (encoder data-parallel sharding).

sglang-encoder-dp-local-loader
    Why: up to 0.5.15.post1 ``run_dp_sharded_mrope_vision_model`` takes the pixel values of
    every image, so each TP rank first materializes all of them on its GPU (an IPC copy or a
    host-to-device copy per image per rank) and then keeps only the ones it owns.
    How: the function also accepts ``load_local_pixel_values=``, ``pixel_values_device=`` and
    ``pixel_values_dtype=`` (0.5.16's keywords). With a loader, the rank computes the release's
    own load-balancing assignment, loads only the images it owns (none: no load at all), and runs
    the release's function on them, so the vision-tower calls and the collective sequence stay
    the release's: every rank joins the same all-gather, also when there are fewer images than
    ranks (the hang of sglang #31212 cannot occur). ``materialize_multimodal_features(features,
    *, device, dtype)`` packs features into one destination buffer with one casting copy each.
    Without a loader the release's function runs unchanged, except at attention-TP size 1 with
    MoonViT3d (Kimi K2.5), where the release calls the tower as ``vision_model(pixel_values,
    grid_thw=...)`` (a TypeError: MoonViT takes ``grid_thws``) and would hand its per-image list
    to the projector: there the tower is called as the release's multi-rank branch calls it and
    its list is concatenated (0.5.16's ``rope_2d_packed`` contract, sglang #31212; that rope type
    is accepted too). ``materialize_multimodal_features`` and the argument checks raise
    0.5.16's exceptions with 0.5.16's messages.
    Upstream: sglang PR #31227 (with #31212), released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where the function
    already takes ``load_local_pixel_values``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import SGLANG_PREFIXES, module, require
from . import _switches

MM_UTILS = "sglang.srt.multimodal.mm_utils"


def materialize_multimodal_features(features, *, device, dtype):
    """Concatenate per-item features into one buffer on ``device``: one casting copy each.

    Raises as 0.5.16's function does (same exception types and messages), so code written
    against upstream behaves the same on a backported release.
    """
    import torch

    if not features:
        raise ValueError("features must contain at least one tensor")
    first = features[0]
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"expected torch.Tensor, got {type(first)}")
    if first.ndim == 0:
        raise ValueError("multimodal feature tensors must have a leading dimension")
    trailing = first.shape[1:]
    total = 0
    for feature in features:
        if not isinstance(feature, torch.Tensor):
            raise TypeError(f"expected torch.Tensor, got {type(feature)}")
        if feature.ndim == 0 or feature.shape[1:] != trailing:
            raise ValueError(
                "multimodal feature tensors must have matching trailing shapes: "
                f"expected {trailing}, got {feature.shape}"
            )
        total += int(feature.shape[0])
    out = torch.empty((total, *trailing), device=device, dtype=dtype)
    offset = 0
    for feature in features:
        length = int(feature.shape[0])
        out[offset : offset + length].copy_(feature, non_blocking=True)
        offset += length
    return out


# 0.5.16's name for MoonViT3d's contract (Kimi K2.5/K2.7): grid metadata passed positionally,
# one embedding tensor per image returned. The releases before call it "rope_2d".
PACKED_ROPE = "rope_2d_packed"


def _takes_grid_thw_keyword(vision_model) -> bool:
    """The tower names a ``grid_thw`` parameter (wrappers are followed to what they wrap)."""
    import inspect

    forward = getattr(vision_model, "forward", None) or vision_model
    try:
        return "grid_thw" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def _run_packed_tower(vision_model, pixel_values, grid_thw_list):
    """Attention-TP size 1 with a packed 2D-RoPE tower: call it the way the release's own
    multi-rank branch does (grid positional, on the host) and concatenate its per-image list."""
    import torch

    out = vision_model(pixel_values, torch.tensor(grid_thw_list))
    return torch.cat(out, dim=0) if isinstance(out, list) else out


class _OwnedPixels:
    """Stands in for the full ``pixel_values`` inside the release's function.

    Holds only this rank's images (keyed by their first patch row in the full batch); the
    release slices exactly those and reads ``shape``/``device``/``dtype`` for an empty rank.
    """

    def __init__(self, slices, total_rows, trailing, device, dtype):
        self._slices = slices
        self.shape = (total_rows, *trailing)
        self.device = device
        self.dtype = dtype

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.start not in self._slices:
            raise IndexError(f"this rank does not own rows {key}")
        return self._slices[key.start]


def _local_image_indices(grid_thw_list, tp_size, tp_rank, assign):
    sizes = [math.prod(grid) for grid in grid_thw_list]
    order, counts, _ = assign(sizes, tp_size)
    bounds = [0, *itertools.accumulate(counts)]
    return list(order[bounds[tp_rank] : bounds[tp_rank + 1]]), sizes


def _make_run_dp_sharded(original, g):
    @functools.wraps(original)
    def run_dp_sharded_mrope_vision_model(
        vision_model,
        pixel_values,
        grid_thw_list,
        *,
        rope_type,
        load_local_pixel_values=None,
        pixel_values_device=None,
        pixel_values_dtype=None,
        **kwargs,
    ):
        if pixel_values is None and load_local_pixel_values is None:
            raise ValueError("pixel_values or load_local_pixel_values must be provided")
        if pixel_values is None and (pixel_values_device is None or pixel_values_dtype is None):
            raise ValueError(
                "pixel_values_device and pixel_values_dtype are required with a local loader"
            )
        from sglang.srt.layers import dp_attention

        packed = rope_type == PACKED_ROPE or (
            rope_type == "rope_2d" and not _takes_grid_thw_keyword(vision_model)
        )
        release_rope = "rope_2d" if packed else rope_type
        tp_size = dp_attention.get_attention_tp_size()
        if tp_size == 1:
            if pixel_values is None:
                pixel_values = load_local_pixel_values(list(range(len(grid_thw_list))))
            if packed:  # the release would pass ``grid_thw=`` and return a list
                return _run_packed_tower(vision_model, pixel_values, grid_thw_list)
            return original(vision_model, pixel_values, grid_thw_list, rope_type=release_rope,
                            **kwargs)
        if pixel_values is not None:
            return original(vision_model, pixel_values, grid_thw_list, rope_type=release_rope,
                            **kwargs)
        tp_rank = dp_attention.get_attention_tp_rank()
        local, sizes = _local_image_indices(
            grid_thw_list, tp_size, tp_rank, g["get_dp_encoder_lb_assignment"]
        )
        starts = [0, *itertools.accumulate(sizes)]
        slices, trailing = {}, (1,)
        if local:
            loaded = load_local_pixel_values(local)
            trailing = tuple(loaded.shape[1:])
            offset = 0
            for index in local:
                slices[starts[index]] = loaded[offset : offset + sizes[index]]
                offset += sizes[index]
        owned = _OwnedPixels(slices, starts[-1], trailing, pixel_values_device,
                             pixel_values_dtype)
        return original(vision_model, owned, grid_thw_list, rope_type=release_rope, **kwargs)

    return run_dp_sharded_mrope_vision_model


@register
class EncoderDpLocalLoaderPatch(Patch):
    name = "sglang-encoder-dp-local-loader"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = MM_UTILS
    modules = (MM_UTILS,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "encoder DP: each rank loads only the images it owns (load_local_pixel_values)"

    def upstream_equivalent(self) -> str | None:
        run = getattr(module(MM_UTILS), "run_dp_sharded_mrope_vision_model", None)
        if run is not None and "load_local_pixel_values" in inspect.signature(run).parameters:
            return "run_dp_sharded_mrope_vision_model takes load_local_pixel_values"
        return None

    def apply(self, ctx: PatchContext) -> None:
        mm = module(MM_UTILS)
        require(mm, "run_dp_sharded_mrope_vision_model", "get_dp_encoder_lb_assignment")
        original = mm.run_dp_sharded_mrope_vision_model
        replacement = _make_run_dp_sharded(original, mm.__dict__)
        ctx.set_attr(mm, "run_dp_sharded_mrope_vision_model", replacement)
        ctx.rebind_globals(original, replacement, SGLANG_PREFIXES)
        if not hasattr(mm, "materialize_multimodal_features"):
            ctx.set_attr(mm, "materialize_multimodal_features", materialize_multimodal_features)
        ctx.set_attr(_switches.SWITCHES, "dp_loader", True)
