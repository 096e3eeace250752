"""Patch of ``sglang.srt.managers.schedule_batch`` (``MultimodalDataItem``/``MultimodalInputs``).

sglang-ipc-deferred-reconstruction
    Why: up to 0.5.15.post1 ``MultimodalInputs.from_processor_output`` reconstructs every
    CUDA-IPC feature on every TP rank as soon as a request arrives, although under encoder data
    parallelism only one rank runs each image through the vision tower.
    How: ``MultimodalDataItem.reconstruct`` takes ``ipc_consumer_count`` (passed to the proxy,
    ``sglang-ipc-consumer-count``); the item gains ``can_defer_cuda_ipc_feature_reconstruction``
    and ``acknowledge_deferred_cuda_ipc_feature``; ``from_processor_output`` leaves an item lazy
    when the Kimi K2.5 or Qwen-VL processor marked it (``sglang-kimi-k25-defer-ipc-marker``,
    ``sglang-qwen-vl-defer-ipc-marker``), its hash and pad value are already set, its feature is
    its only IPC proxy, the server runs the encoder data-parallel, and every piece that later
    consumes or releases it is active in this process (transport, DP loader, the marked model's
    owner-only materialization, cache-hit release). Anything else is reconstructed eagerly by
    the release's own code.
    Upstream: sglang PR #31227, released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1 (0.5.12.post1 hashes on the tokenizer only with
    ``SGLANG_MM_PRECOMPUTE_HASH``; without it nothing is deferrable and the release runs as is);
    stands aside ("upstream") where ``can_defer_cuda_ipc_feature_reconstruction`` exists.
"""

from __future__ import annotations

import functools
import inspect
import threading

from ...core.base import Patch, PatchContext
from ...core.containment import answer, contained
from ...core.registry import register
from .._common import module, require
from . import _switches

SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"

_state = threading.local()  # set while from_processor_output runs on this thread


def _other_proxies(item) -> bool:
    if _switches.is_proxy(getattr(item, "precomputed_embeddings", None)):
        return True
    return any(_switches.is_proxy(v) for v in (item.model_specific_data or {}).values())


def can_defer_cuda_ipc_feature_reconstruction(self) -> bool:
    """Whether the encoder-DP owner rank will materialize this feature lazily."""
    return bool(
        _switches.is_marked(self)
        and self.hash is not None
        and self.pad_value is not None
        and _switches.is_proxy(self.feature)
        and not _other_proxies(self)
    )


def acknowledge_deferred_cuda_ipc_feature(self, consumer_count: int = 1) -> None:
    """Release a lazy IPC feature when an embedding-cache hit skips the vision tower."""
    if _switches.is_proxy(self.feature):
        self.feature.acknowledge_consumption(consumer_count)


setattr(can_defer_cuda_ipc_feature_reconstruction, _switches.OURS, True)
setattr(acknowledge_deferred_cuda_ipc_feature, _switches.OURS, True)


def _make_reconstruct(original, takes_device: bool):
    @functools.wraps(original)
    def reconstruct(self, target_device=None, ipc_consumer_count: int = 1):
        if getattr(_state, "deferring", False) and _should_defer(self):
            return
        if ipc_consumer_count != 1 and _switches.is_proxy(self.feature):
            if target_device is None:
                import torch

                target_device = torch.cuda.current_device()
            self.feature = self.feature.reconstruct_on_target_device(
                target_device, consumer_count=ipc_consumer_count
            )
        if takes_device:
            if target_device is None:
                import torch

                target_device = torch.cuda.current_device()
            return original(self, target_device)
        return original(self)

    return reconstruct


@contained("sglang-ipc-deferred-reconstruction", answer(False))  # a fault: eager, as the release
def _should_defer(item) -> bool:
    return (
        _switches.SWITCHES.all_on(item)
        and _switches.dp_encoder_enabled()
        and item.can_defer_cuda_ipc_feature_reconstruction()
    )


def _make_from_processor_output(original):
    func = original.__func__

    @functools.wraps(func)
    def from_processor_output(obj):
        previous = getattr(_state, "deferring", False)
        _state.deferring = True
        try:
            return func(obj)
        finally:
            _state.deferring = previous

    return staticmethod(from_processor_output)


@register
class IpcDeferredReconstructionPatch(Patch):
    name = "sglang-ipc-deferred-reconstruction"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = SCHEDULE_BATCH
    modules = (SCHEDULE_BATCH,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "CUDA-IPC features stay lazy until the encoder-DP owner rank materializes them"

    def upstream_equivalent(self) -> str | None:
        return _switches.upstream_has_it(module(SCHEDULE_BATCH))

    def apply(self, ctx: PatchContext) -> None:
        sb = module(SCHEDULE_BATCH)
        require(sb, "MultimodalDataItem", "MultimodalInputs")
        item_cls, inputs_cls = sb.MultimodalDataItem, sb.MultimodalInputs
        require(item_cls, "reconstruct")
        original_fpo = inputs_cls.__dict__["from_processor_output"]
        if not isinstance(original_fpo, staticmethod):
            raise TypeError("MultimodalInputs.from_processor_output is not a staticmethod")
        original = item_cls.__dict__["reconstruct"]
        takes_device = "target_device" in inspect.signature(original).parameters
        ctx.set_attr(item_cls, "reconstruct", _make_reconstruct(original, takes_device))
        ctx.set_attr(
            item_cls,
            "can_defer_cuda_ipc_feature_reconstruction",
            can_defer_cuda_ipc_feature_reconstruction,
        )
        ctx.set_attr(
            item_cls, "acknowledge_deferred_cuda_ipc_feature", acknowledge_deferred_cuda_ipc_feature
        )
        ctx.set_attr(inputs_cls, "from_processor_output", _make_from_processor_output(original_fpo))
        if not hasattr(sb, _switches.DEFER_KEY_NAME):  # 0.5.16 imports it here too
            ctx.set_attr(sb, _switches.DEFER_KEY_NAME, _switches.DEFER_KEY)
        ctx.set_attr(_switches.SWITCHES, "deferral", True)
