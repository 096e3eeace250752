"""Shared pieces of the SGLang Kimi deferred-preprocessing patches (no engine import).

The sender (``multimodal_processors_kimi_k25_deferred``) and the owner
(``models_kimi_k25_deferred``) agree on three things defined here:

- ``ITEM_KEY``: the ``model_specific_data`` key of a multimodal item that carries one
  :class:`~vlm_fastpath.kimi_integration.deferred.DeferredPayload` per image (a list, so
  SGLang's own per-image split of a bundled item slices it like ``image_grid_thw``);
- the item's ``feature``: a 1-D uint8 content digest with one byte per patch
  (:func:`digest_feature`), so SGLang's per-image split, hashing, pad values and embedding
  cache keep working on real tensors while the pixels travel in the payload;
- ``VLM_FASTPATH_DEFER``: ``1`` always defers host images, ``0`` never, unset (``auto``)
  defers where the release would preprocess on the CPU in the tokenizer process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .._common import grid_of

ITEM_KEY = "_vlm_fastpath_kimi_deferred"
OWNER_MARK = "__vlm_fastpath_deferred_owner__"


def digest_feature(payload: Any, num_patches: int):
    """A uint8 ``[num_patches]`` tensor holding the payload's content digest.

    The first ``min(32, num_patches)`` bytes are a SHA-256 over the plan and every pixel
    byte (at least 4 bytes: the smallest Kimi image has 2x2 patches; 8 or more for any
    image larger than 28x28), the rest zeros. Its hash depends only on the image.
    """
    import torch

    hasher = hashlib.sha256()
    for media in payload.medias:
        hasher.update(repr((media.kind, media.plan, media.decision.form.value)).encode())
        if media.pixel_values is not None:
            hasher.update(media.pixel_values.contiguous().numpy().tobytes())
        for frame in media.frames:
            data = frame.data
            if isinstance(data, torch.Tensor):
                hasher.update(repr(tuple(data.shape)).encode())
                hasher.update(data.contiguous().numpy().tobytes())
            else:
                hasher.update(bytes(data))
    digest = hasher.digest()
    out = torch.zeros(num_patches, dtype=torch.uint8)
    n = min(len(digest), num_patches)
    out[:n] = torch.frombuffer(bytearray(digest[:n]), dtype=torch.uint8)
    return out


def merge_payloads(payloads: Sequence[Any]):
    """One payload holding every media of ``payloads`` in order (same config/background)."""
    from ....kimi_integration.deferred import DeferredPayload
    from ....kimi_integration.errors import DeferredPayloadError

    if not payloads:
        raise DeferredPayloadError("no deferred payloads to merge")
    first = payloads[0]
    medias = []
    for payload in payloads:
        if not isinstance(payload, DeferredPayload):
            raise DeferredPayloadError(
                f"expected a DeferredPayload, got {type(payload).__name__}"
            )
        if (payload.config, payload.background, payload.version, payload.recipe) != (
            first.config, first.background, first.version, first.recipe
        ):
            raise DeferredPayloadError("deferred items of one batch disagree on their config")
        medias.extend(payload.medias)
    decoder = first.decoder
    for payload in payloads:
        if any(f.form.value == "encoded" for m in payload.medias for f in m.frames):
            decoder = payload.decoder
    return DeferredPayload(
        medias=medias, config=first.config, background=first.background, decoder=decoder,
        version=first.version, recipe=first.recipe,
    )


_OWNER_PROCESSORS: dict[str, Any] = {}


def owner_processor(payload: Any):
    """The owner's ``DeferredKimiProcessor`` for a payload's config and background (cached)."""
    import json

    from ....kimi_integration.deferred import DeferredKimiProcessor

    recipe = getattr(payload, "recipe", "k25")
    key = json.dumps([payload.config, payload.background, recipe], sort_keys=True, default=str)
    proc = _OWNER_PROCESSORS.get(key)
    if proc is None:
        proc = DeferredKimiProcessor(payload.config, payload.background or None, recipe=recipe)
        _OWNER_PROCESSORS[key] = proc
    return proc


K3_ITEM_KEY = "_vlm_fastpath_kimi_k3_deferred"


# -- owner side, shared by the K2.5 and K3 owners ------------------------------------------------
class LazyFeatureView:
    """An item whose ``feature`` is built on first access from its deferred payload.

    Handed to the release's own ``get_image_feature`` in place of the item, so the release
    decides which rank touches ``feature``: under encoder DP only the owner materializes.
    """

    __slots__ = ("_item", "_device", "_feature", "_build")

    def __init__(self, item: Any, device: Any, build: Any) -> None:
        object.__setattr__(self, "_item", item)
        object.__setattr__(self, "_device", device)
        object.__setattr__(self, "_feature", None)
        object.__setattr__(self, "_build", build)

    @property
    def feature(self) -> Any:
        if self._feature is None:
            data = self._item.model_specific_data
            grid = grid_of(data)
            object.__setattr__(self, "_feature", self._build(data, self._device, grid))
        return self._feature

    @feature.setter
    def feature(self, value: Any) -> None:
        object.__setattr__(self, "_feature", value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._item, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "feature":
            object.__setattr__(self, "_feature", value)
        else:
            setattr(self._item, name, value)


def materialize_payloads(payloads: Sequence[Any], device: Any, grid: Any, label: str) -> Any:
    """float32 ``pixel_values`` of an item's payloads on ``device`` (checked against grid).

    One implementation for K2.5 and K3: the payload names its recipe and the owner's
    ``DeferredKimiProcessor`` runs it (K3's resize is the release's float ``interpolate``,
    so only the K2.5 recipe takes a ``VLM_FASTPATH_DEFER_RESIZE`` backend).
    """
    from .... import settings

    payload = merge_payloads(list(payloads))
    proc = owner_processor(payload)
    backend = settings.defer_resize() if payload.recipe == "k25" else "auto"
    out = proc.run(payload, device=device, resize_backend=backend)
    check_grids(out["grid_thws"], grid, label)
    return out["pixel_values"]


def tower_device(model: Any) -> Any:
    """The device of ``model.vision_tower`` (CPU when it has none)."""
    import torch

    tower = getattr(model, "vision_tower", None)
    device = getattr(tower, "device", None)
    if device is None and tower is not None:
        device = next(tower.parameters()).device
    return torch.device(device) if device is not None else torch.device("cpu")


def payloads_in(item: Any, key: str) -> Any:
    """The deferred payloads an item carries under ``key`` (None for an ordinary item)."""
    data = getattr(item, "model_specific_data", None)
    return data.get(key) if isinstance(data, dict) else None


def check_grids(got: Any, grid: Any, label: str) -> None:
    """Raise when the grids the owner computed differ from the item's (tokenizer-side) grids."""
    import torch

    if grid is None:
        return
    want = torch.as_tensor(grid).reshape(-1, 3).cpu().to(torch.int64)
    got = torch.as_tensor(got).cpu().to(torch.int64)
    if not torch.equal(got, want):
        raise ValueError(f"deferred {label} grids {got.tolist()} != item grids {want.tolist()}")


def model_has_owner(module_name: str, class_name: str) -> bool:
    """True when this process's model class carries a deferred-owner ``get_image_feature``."""
    import sys

    model = getattr(sys.modules.get(module_name), class_name, None)
    return bool(getattr(getattr(model, "get_image_feature", None), OWNER_MARK, False))


def deferred_get_image_feature(original: Any, key: str, materialize: Any) -> Any:
    """Wrap ``get_image_feature``: items with payloads under ``key`` become
    ``LazyFeatureView``s whose feature is ``materialize(payloads, device, grid)``."""
    import functools

    def build(data: dict, device: Any, grid: Any) -> Any:
        return materialize(data[key], device, grid)

    @functools.wraps(original)
    def get_image_feature(self, items, *args, **kwargs):
        if not any(payloads_in(item, key) for item in items):
            return original(self, items, *args, **kwargs)
        device = tower_device(self)
        views = [LazyFeatureView(item, device, build) if payloads_in(item, key) else item
                 for item in items]
        return original(self, views, *args, **kwargs)

    setattr(get_image_feature, OWNER_MARK, True)
    return get_image_feature


def deferring_call(original: Any, should_defer: Any, deferred_call: Any) -> Any:
    """Wrap a processor wrapper's ``__call__``: when ``should_defer(self, images)`` says so,
    answer with ``deferred_call(self, text, images, original_input_ids, kwargs)`` instead
    (which returns None to hand the request back to the release's own call)."""
    import functools

    @functools.wraps(original)
    def __call__(self, text=None, images=None, **kwargs):
        found = images or kwargs.get("images")
        if not should_defer(self, found):
            return original(self, text, images, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k != "images"}
        original_input_ids = rest.pop("sglang_original_input_ids", None)
        out = deferred_call(self, text, list(found), original_input_ids, rest)
        # None: the deferred path cannot reproduce this request exactly; run the release's.
        return original(self, text, images, **kwargs) if out is None else out

    return __call__


def collect_with_payloads(original: Any, key: str, label: str) -> Any:
    """Wrap ``collect_mm_items_from_processor_output``: move ``data_dict[key]`` (the payload
    list) onto the one image item the release builds from the rest of the processor output."""
    import functools

    @functools.wraps(original)
    def collect_mm_items_from_processor_output(self, data_dict, *args, **kwargs):
        if not isinstance(data_dict, dict) or key not in data_dict:
            return original(self, data_dict, *args, **kwargs)
        rest = {k: v for k, v in data_dict.items() if k != key}
        items = original(self, rest, *args, **kwargs)
        images = [item for item in items if item.is_image()]
        if len(images) != 1:
            raise RuntimeError(
                f"deferred {label} preprocessing expected one image item, got {len(images)}"
            )
        images[0].model_specific_data[key] = list(data_dict[key])
        return items

    return collect_mm_items_from_processor_output
