"""Shared state of the deferred CUDA-IPC / encoder-DP patches (no engine import at import time).

The feature spans five upstream modules, each patched by its own ``Patch`` (so each can be
reported, disabled and reverted on its own). A feature is only left lazy on the scheduler when
every piece that consumes or releases it is active in this process; ``SWITCHES`` records which
pieces are, and each patch turns its switch on through ``ctx.set_attr`` (revert turns it off).
"""

from __future__ import annotations

import sys
from typing import Any

# Same marker name and value as upstream 0.5.16+; the patches also publish it on the release's
# modules under upstream's constant name.
DEFER_KEY_NAME = "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY"
DEFER_KEY = "_sglang_defer_cuda_ipc_feature_reconstruction"
# Where releases define ``CudaIpcTensorTransportProxy`` (up to 0.5.17; from 0.5.18).
TRANSPORT_MODULES = (
    "sglang.srt.utils.cuda_ipc_transport_utils",
    "sglang.srt.multimodal.transport.cuda_ipc",
)
# Set on an item (every rank, same decision) once its pool slot has been accounted for:
# by the owner's reconstruction with the full consumer count, or by the cache-hit release.
SETTLED_ATTR = "_vlm_fastpath_ipc_settled"

OURS = "_vlm_fastpath_ipc"  # on the methods our patches add (not upstream's)
OWNER_MARK = "_vlm_fastpath_encoder_dp_owner_only"  # on our Kimi get_image_feature
KIMI_MODELS = frozenset({"KimiK25ForConditionalGeneration"})
KIMI_PROCESSORS = frozenset({"KimiK2_5VLImageProcessor"})
# Qwen-VL items also name the architecture whose owner-only get_image_feature must be in place
# (one processor serves several Qwen models; only these have an owner-only patch).
OWNER_KEY = "_vlm_fastpath_ipc_owner"
QWEN_PROCESSORS = frozenset({"QwenVLImageProcessor"})
QWEN_OWNERS = {  # architecture: (module, class defining get_image_feature, switch)
    "Qwen2_5_VLForConditionalGeneration": (
        "sglang.srt.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "qwen2_5_owner"),
    "Qwen3VLForConditionalGeneration": (
        "sglang.srt.models.qwen3_vl", "Qwen3VLForConditionalGeneration", "qwen3_owner"),
    "Qwen3VLMoeForConditionalGeneration": (
        "sglang.srt.models.qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "qwen3_owner"),
}

UPSTREAM_REASON = (
    "MultimodalDataItem has can_defer_cuda_ipc_feature_reconstruction (sglang #31227)"
)


class _Switches:
    transport = False  # proxies take consumer_count and acknowledge_consumption
    deferral = False  # MultimodalDataItem.reconstruct(ipc_consumer_count=); lazy items
    dp_loader = False  # run_dp_sharded_mrope_vision_model(load_local_pixel_values=...)
    kimi_owner = False  # Kimi K2.5 materializes only the images its rank owns
    cache_ack = False  # embedding-cache hits release lazy features
    qwen2_5_owner = False  # Qwen2.5-VL materializes only the images its rank owns
    qwen3_owner = False  # Qwen3-VL (and its MoE) likewise

    def all_on(self, item: Any = None) -> bool:
        """Every piece consuming ``item`` is active (no item, or no owner named: Kimi K2.5)."""
        owner = (getattr(item, "model_specific_data", None) or {}).get(OWNER_KEY)
        if owner is not None:
            entry = QWEN_OWNERS.get(owner)
            if entry is None or not getattr(self, entry[2]):
                return False
            shared = (self.transport, self.deferral, self.dp_loader, self.cache_ack)
            return all(shared) and owner_in_place(entry[0], owner)
        switches = (self.transport, self.deferral, self.dp_loader, self.kimi_owner, self.cache_ack)
        return all(switches) and kimi_owner_in_place()


SWITCHES = _Switches()


def upstream_has_it(schedule_batch: Any) -> str | None:
    item_cls = getattr(schedule_batch, "MultimodalDataItem", None)
    method = getattr(item_cls, "can_defer_cuda_ipc_feature_reconstruction", None)
    if method is not None and not getattr(method, OURS, False):
        return UPSTREAM_REASON
    return None


def server_args() -> Any:
    from sglang.srt import server_args as sa

    getter = getattr(sa, "get_global_server_args", None) or sa.get_server_args
    return getter()


def server_tp_size() -> int:
    """The count the IPC pool waits for (``MmItemMemoryChunk.try_to_recycle``: ``tp_size``)."""
    try:
        return max(int(getattr(server_args(), "tp_size", 1) or 1), 1)
    except Exception:  # noqa: BLE001 - server args not published: a single consumer
        return 1


def dp_encoder_enabled() -> bool:
    try:
        return bool(getattr(server_args(), "mm_enable_dp_encoder", False))
    except Exception:  # noqa: BLE001
        return False


def proxy_classes() -> tuple[type, ...]:
    """The release's ``CudaIpcTensorTransportProxy`` classes already imported in this process."""
    found = []
    for name in TRANSPORT_MODULES:
        cls = getattr(sys.modules.get(name), "CudaIpcTensorTransportProxy", None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def is_proxy(value: Any) -> bool:
    """A CUDA-IPC transport proxy.

    An instance of the release's proxy class counts whatever attributes it has (upstream checks
    ``isinstance``; a proxy built with ``__new__`` has no ``proxy_state`` yet is one); anything
    else only when it looks like one (a test double, a class from another module).
    """
    classes = proxy_classes()
    if classes and isinstance(value, classes):
        return True
    return hasattr(value, "reconstruct_on_target_device") and hasattr(value, "proxy_state")


def is_marked(item: Any) -> bool:
    data = getattr(item, "model_specific_data", None) or {}
    return bool(data.get(DEFER_KEY, False))


def pending(item: Any) -> bool:
    """A deferred feature whose pool slot nobody has accounted for yet (on this rank)."""
    return is_marked(item) and is_proxy(item.feature) and not getattr(item, SETTLED_ATTR, False)


def settle(item: Any) -> None:
    if is_marked(item):
        setattr(item, SETTLED_ATTR, True)


def attention_tp_rank() -> int:
    from sglang.srt.layers import dp_attention

    return int(dp_attention.get_attention_tp_rank())


def device_index(device: Any) -> int:
    if getattr(device, "index", None) is not None:
        return int(device.index)
    if getattr(device, "type", None) == "cuda":
        import torch

        return int(torch.cuda.current_device())
    return 0


def kimi_owner_in_place() -> bool:
    """Our owner-only ``get_image_feature`` is the one the Kimi K2.5 class uses right now."""
    return owner_in_place("sglang.srt.models.kimi_k25", "KimiK25ForConditionalGeneration")


def owner_in_place(module_name: str, class_name: str) -> bool:
    """Our owner-only ``get_image_feature`` is the one ``class_name`` uses right now."""
    cls = getattr(sys.modules.get(module_name), class_name, None)
    func = getattr(cls, "get_image_feature", None)
    while func is not None:  # ours may be wrapped (functools.wraps keeps ``__wrapped__``)
        if getattr(func, OWNER_MARK, False):
            return True
        func = getattr(func, "__wrapped__", None)
    return False
