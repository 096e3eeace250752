"""Shared pieces of the owner-only ``get_image_feature`` patches under encoder DP (not a patch).

Used by ``models_kimi_k25.py``, ``models_qwen2_5_vl.py`` and ``models_qwen3_vl.py`` of this
folder; nothing here imports SGLang at import time.
"""

from __future__ import annotations

from .._common import grid_of
from . import _switches


def host_grid_rows(item) -> list[list[int]]:
    """The item's ``[t, h, w]`` rows, read on the host (no device round trip)."""
    grid = grid_of(item.model_specific_data, item)
    if hasattr(grid, "device") and grid.device.type != "cpu":
        grid = grid.cpu()
    rows = grid.tolist()
    return rows if rows and isinstance(rows[0], list) else [rows]


def make_local_loader(items, device, dtype, consumers, materialize, label=None):
    """``load_local_pixel_values`` for ``run_dp_sharded_mrope_vision_model``: the owner rank
    reconstructs a lazy IPC feature with the full consumer count, then packs its images into one
    buffer (``materialize_multimodal_features``).

    ``label``: the model's name in the error raised for a feature that is still no tensor after
    reconstruction (upstream's wording: ``"<label> image feature must be a torch.Tensor"``).
    """

    def load_local_pixel_values(indices):
        import torch

        features = []
        for index in indices:
            item = items[index]
            if _switches.is_proxy(item.feature):
                item.reconstruct(_switches.device_index(device), ipc_consumer_count=consumers)
            feature = item.feature
            if label is not None and not isinstance(feature, torch.Tensor):
                raise TypeError(
                    f"{label} image feature must be a torch.Tensor, got {type(feature)}"
                )
            features.append(feature)
        return materialize(features, device=device, dtype=dtype)

    return load_local_pixel_values


def feature_width(feature) -> int | None:
    """Last dimension of a tensor or of a CUDA-IPC proxy's tensor (without materializing it)."""
    if _switches.is_proxy(feature):
        state = getattr(feature, "proxy_state", None) or {}
        shape = (state.get("ipc_extra") or {}).get("recons_shape")
        if shape is None:
            shape = getattr(state.get("tensor_data"), "shape", None)
    else:
        shape = getattr(feature, "shape", None)
    if shape is None or len(shape) != 2:
        return None
    return int(shape[-1])


def reconstruct_eagerly(items, device) -> None:
    """What the release does on every rank (one consumer each): for the fallback paths."""
    for item in items:
        if _switches.is_proxy(item.feature):
            item.reconstruct(_switches.device_index(device))
        _switches.settle(item)


def uses_local_loader(model_cls) -> bool:
    """Whether the release's model class already passes ``load_local_pixel_values``."""
    import inspect

    try:
        return "load_local_pixel_values" in inspect.getsource(model_cls)
    except (OSError, TypeError):
        return False


def make_qwen_get_image_feature(current, mm_g, tower_runs=None):
    """Owner-only ``get_image_feature`` for the Qwen-VL models (``self.visual``, rope 3D).

    ``tower_runs(model, width)``: whether the release would run the vision tower on features of
    that last dimension (Qwen2.5-VL passes already-embedded features through); when it would not,
    or a width is unknown, every rank reconstructs as the release does and ``current`` runs.
    """
    import functools

    @functools.wraps(current)
    def get_image_feature(self, items):
        if not (self.use_data_parallel and _switches.SWITCHES.dp_loader):
            return current(self, items)
        visual = self.visual
        device, dtype = visual.device, visual.dtype
        widths = [feature_width(item.feature) for item in items]
        if any(w is None for w in widths) or (
            tower_runs is not None and not all(tower_runs(self, w) for w in widths)
        ):
            reconstruct_eagerly(items, device)
            return current(self, items)
        grid_list = [row for item in items for row in host_grid_rows(item)]
        consumers = _switches.server_tp_size()
        for item in items:
            _switches.settle(item)  # every rank: this item's slot is accounted for below
        return mm_g["run_dp_sharded_mrope_vision_model"](
            visual,
            None,
            grid_list,
            rope_type="rope_3d",
            load_local_pixel_values=make_local_loader(
                items, device, dtype, consumers, mm_g["materialize_multimodal_features"]
            ),
            pixel_values_device=device,
            pixel_values_dtype=dtype,
        )

    setattr(get_image_feature, _switches.OWNER_MARK, True)
    return get_image_feature
