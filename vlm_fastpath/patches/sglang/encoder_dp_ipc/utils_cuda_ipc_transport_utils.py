"""Patch of ``sglang.srt.utils.cuda_ipc_transport_utils`` (the CUDA-IPC feature transport).

sglang-ipc-consumer-count
    Why: a feature sent from the tokenizer through the CUDA-IPC pool lives in a pool slot that
    is recycled once the slot's shared sync flag reaches ``tp_size``. Up to 0.5.15.post1 the
    only way to move the flag is ``reconstruct_on_target_device``, which adds exactly 1: every
    TP rank has to copy the whole feature (TP8, 4 images: 32 copies for 4 consumed) or the slot
    leaks.
    How: ``reconstruct_on_target_device(rebuild_device_idx, consumer_count=1)``: after the
    release's own copy (which adds 1) it adds ``consumer_count - 1`` more, under the release's
    file lock; ``acknowledge_consumption(consumer_count=1)`` adds the count without copying (an
    embedding-cache hit). Both count at most once per proxy. With ``consumer_count=1`` the
    release's code runs unchanged. The module also gets upstream's
    ``DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY`` (same value as 0.5.16's), and the proxy's
    counted state is upstream's ``_consumer_acknowledged``.
    Upstream: sglang PR #31227, released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MultimodalDataItem`` has ``can_defer_cuda_ipc_feature_reconstruction``.
"""

from __future__ import annotations

import functools

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import module, require
from . import _switches

TRANSPORT = "sglang.srt.utils.cuda_ipc_transport_utils"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"
# This proxy (this rank) has moved the flag: upstream's attribute name, so code reading it on a
# 0.5.16+ proxy reads the same on a backported one.
_COUNTED = "_consumer_acknowledged"


def _add_to_flag(proxy, count: int, g) -> None:
    """``sync_flag += count`` exactly as the release does it (file lock, then close the shm)."""
    import fcntl

    lock_file = g["SHM_LOCK_FILE"]
    open(lock_file, "a").close()
    with open(lock_file, "w+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        sync_flag = proxy.get_sync_flag
        sync_flag += count
        fcntl.flock(f, fcntl.LOCK_UN)
    proxy.close_shm()


def _uses_pool_flag(proxy) -> bool:
    # The release moves the flag only on the IPC path (not for ``tensor_data`` fallbacks).
    state = getattr(proxy, "proxy_state", None) or {}
    return bool(state.get("ipc_extra")) and getattr(proxy, "sync_data_meta", None) is not None


def _make_reconstruct(original, g):
    @functools.wraps(original)
    def reconstruct_on_target_device(self, rebuild_device_idx, consumer_count: int = 1):
        counted = getattr(self, _COUNTED, False)
        if consumer_count <= 0 and not counted:
            raise ValueError("consumer_count must be positive")
        cached = getattr(self, "reconstruct_tensor", None)
        out = original(self, rebuild_device_idx)
        if out is cached or not _uses_pool_flag(self):
            return out  # the release's cache hit, or a path that never moves the flag
        if counted:
            return out  # a second copy of an already counted proxy (the release adds 1 again)
        if consumer_count > 1:
            _add_to_flag(self, consumer_count - 1, g)
        setattr(self, _COUNTED, True)
        return out

    return reconstruct_on_target_device


def _make_acknowledge(g):
    def acknowledge_consumption(self, consumer_count: int = 1):
        """Release this proxy's pool slot for ``consumer_count`` consumers without a copy."""
        if getattr(self, _COUNTED, False):
            return  # idempotent, as upstream: a second cache hit of the same proxy adds nothing
        if consumer_count <= 0:
            raise ValueError("consumer_count must be positive")
        if not _uses_pool_flag(self):
            return
        _add_to_flag(self, consumer_count, g)
        setattr(self, _COUNTED, True)

    return acknowledge_consumption


@register
class IpcConsumerCountPatch(Patch):
    name = "sglang-ipc-consumer-count"
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = SCHEDULE_BATCH  # imports the transport; present in every release
    modules = (TRANSPORT,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "CUDA-IPC proxy: reconstruct with a consumer count, acknowledge without a copy"

    def upstream_equivalent(self) -> str | None:
        return _switches.upstream_has_it(module(SCHEDULE_BATCH))

    def apply(self, ctx: PatchContext) -> None:
        transport = module(TRANSPORT)
        require(transport, "CudaIpcTensorTransportProxy", "SHM_LOCK_FILE")
        proxy = transport.CudaIpcTensorTransportProxy
        require(proxy, "reconstruct_on_target_device", "get_sync_flag", "close_shm")
        if hasattr(proxy, "acknowledge_consumption"):
            raise RuntimeError("proxy already has acknowledge_consumption")
        g = transport.__dict__
        original = proxy.__dict__["reconstruct_on_target_device"]
        ctx.set_attr(proxy, "reconstruct_on_target_device", _make_reconstruct(original, g))
        ctx.set_attr(proxy, "acknowledge_consumption", _make_acknowledge(g))
        if not hasattr(transport, _switches.DEFER_KEY_NAME):  # where 0.5.16 defines it
            ctx.set_attr(transport, _switches.DEFER_KEY_NAME, _switches.DEFER_KEY)
        ctx.set_attr(_switches.SWITCHES, "transport", True)
