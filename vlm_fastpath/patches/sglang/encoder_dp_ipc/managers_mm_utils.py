"""Patch of ``sglang.srt.managers.mm_utils`` for lazy CUDA-IPC features on embedding-cache hits.

Kept apart from ``managers_mm_utils.py`` (the host-to-device patches of the same module) so each
can be reported and disabled on its own.

sglang-ipc-cache-hit-release
    Why: a CUDA-IPC feature left lazy for the encoder-DP owner (``sglang-ipc-deferred-
    reconstruction``) is never copied when its embedding is already cached, so nothing would
    move its pool slot's sync flag: the slot would leak.
    How: wraps the release's two cache lookups, ``_get_chunked_embedding_full`` and
    ``_get_chunked_embedding_by_item``. After each, every lazy item it looked up (all of them,
    resp. those overlapping the chunk) that no owner has accounted for is released once by
    attention-TP rank 0 with the TP size as consumer count (what the recycler waits for), and
    marked accounted for on every rank, so a later chunk's hit releases nothing twice.
    Upstream: sglang PR #31227 (``_acknowledge_deferred_cuda_ipc_cache_hits``), 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MultimodalDataItem`` has ``can_defer_cuda_ipc_feature_reconstruction``.
"""

from __future__ import annotations

import functools

from ...base import Patch, PatchContext
from ...registry import register
from .._common import SGLANG_PREFIXES, module, require
from . import _switches

MM_UTILS = "sglang.srt.managers.mm_utils"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"


def release_cache_hits(items) -> int:
    """Release the lazy items nobody accounted for (rank 0 only); returns how many."""
    hits = [item for item in items if _switches.pending(item)]
    if not hits:
        return 0
    if _switches.attention_tp_rank() == 0:
        consumers = _switches.server_tp_size()
        for item in hits:
            item.acknowledge_deferred_cuda_ipc_feature(consumers)
    for item in hits:
        _switches.settle(item)
    return len(hits)


def _arg(args, kwargs, index, name):
    return args[index] if len(args) > index else kwargs[name]


def _wrap_full(original):
    @functools.wraps(original)
    def _get_chunked_embedding_full(*args, **kwargs):
        out = original(*args, **kwargs)
        release_cache_hits(_arg(args, kwargs, 1, "embedding_items_per_req"))
        return out

    return _get_chunked_embedding_full


def _wrap_by_item(original):
    @functools.wraps(original)
    def _get_chunked_embedding_by_item(*args, **kwargs):
        out = original(*args, **kwargs)
        items = _arg(args, kwargs, 1, "embedding_items_per_req")
        offsets = _arg(args, kwargs, 2, "items_offset")
        chunk_start = _arg(args, kwargs, 3, "extend_prefix_len")
        length = _arg(args, kwargs, 4, "extend_seq_len")
        if length > 0:
            chunk_end = chunk_start + length
            looked_up = [
                item
                for item, (start, end) in zip(items, offsets, strict=False)
                if end >= chunk_start and start < chunk_end
            ]
            release_cache_hits(looked_up)
        return out

    return _get_chunked_embedding_by_item


@register
class IpcCacheHitReleasePatch(Patch):
    name = "sglang-ipc-cache-hit-release"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = MM_UTILS
    modules = (MM_UTILS,)
    upstream_pr = "sgl-project/sglang#31227"
    summary = "embedding-cache hits release lazy CUDA-IPC features exactly once"
    # wraps the embedding call sites that sglang-batched-feature-h2d wrapped first
    after = ("sglang-batched-feature-h2d",)

    def upstream_equivalent(self) -> str | None:
        return _switches.upstream_has_it(module(SCHEDULE_BATCH))

    def apply(self, ctx: PatchContext) -> None:
        mm = module(MM_UTILS)
        require(mm, "_get_chunked_embedding_full", "_get_chunked_embedding_by_item")
        for name, wrap in (
            ("_get_chunked_embedding_full", _wrap_full),
            ("_get_chunked_embedding_by_item", _wrap_by_item),
        ):
            current = getattr(mm, name)
            replacement = wrap(current)
            ctx.set_attr(mm, name, replacement)
            ctx.rebind_globals(current, replacement, SGLANG_PREFIXES)
        ctx.set_attr(_switches.SWITCHES, "cache_ack", True)
