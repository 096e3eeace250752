"""vLLM ``vllm.multimodal.inputs``: a batch never pads compact image rows to full width.

vLLM concatenates one field of several items (``MultiModalFlatField._reduce_data``); where their
widths differ it zero-pads every item to the widest (a case meant for audio of different
lengths). Compact Qwen image rows batched with full ones (items in vLLM's processor caches
from before ``revert()`` of ``vllm-qwen-compact-image-rows``, meeting new full ones) would be
padded with zeros and read as full rows: a silent wrong embedding. This wrapper expands the
compact items of such a batch to full rows first (the same exact expansion the towers make),
for the Qwen geometries only (3 channels of 14x14 or 16x16, 2 temporal copies); every other
batch goes to vLLM's code untouched.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import register

INPUTS = "vllm.multimodal.inputs"
FIELD = "MultiModalFlatField"
# (channels, temporal, patch) of the Qwen2/2.5-VL (14) and Qwen3-VL (16) towers.
GEOMETRIES = ((3, 2, 14), (3, 2, 16))


def widen(batch: list[Any]) -> list[Any] | None:
    """``batch`` with its compact Qwen rows expanded, where it mixes compact and full rows of
    one geometry; None otherwise (nothing to do)."""
    import torch

    from vlm_fastpath.qwen_integration import compact

    if len(batch) < 2 or not all(isinstance(t, torch.Tensor) and t.ndim == 2 for t in batch):
        return None
    widths = {int(t.shape[1]) for t in batch}
    for channels, temporal, patch in GEOMETRIES:
        narrow = channels * patch * patch
        if widths == {narrow, narrow * temporal}:
            return [compact.expand(t, channels, temporal, patch)
                    if compact.is_compact(t, channels, temporal, patch) else t for t in batch]
    return None


def make_reduce(original: Any) -> Any:
    @functools.wraps(original)
    def _reduce_data(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        wide = widen(batch) if getattr(self, "dim", 0) == 0 else None
        return original(self, batch if wide is None else wide, *args, **kwargs)

    _reduce_data.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return _reduce_data


@register
class CompactRowsBatchPatch(Patch):
    name = "vllm-qwen-compact-mixed-batch"
    engine = "vllm"
    versions = ">=0.22"
    backport = False
    trigger = INPUTS
    modules = (INPUTS,)
    upstream_pr = "vllm-project/vllm#44787"
    summary = ("a batch mixing compact and full Qwen image rows gets full rows (never padded "
               "with zeros)")
    stays_when_faulted = ("compact rows in vLLM's caches may meet full ones at any later step: "
                          "the guard stays for the life of the process")

    def _field(self) -> Any:
        return getattr(sys.modules[INPUTS], FIELD, None)

    def not_needed(self) -> str | None:
        return None if self._field() is not None else f"{INPUTS} has no {FIELD}"

    def contract(self) -> str | None:
        return signature_clause(self._field(), "_reduce_data", ("self", "batch"))

    def apply(self, ctx: PatchContext) -> None:
        field = self._field()
        original = field.__dict__.get("_reduce_data")
        if not callable(original):
            raise LookupError(f"{FIELD}._reduce_data is not defined on the class")
        ctx.set_attr(field, "_reduce_data", make_reduce(original))
