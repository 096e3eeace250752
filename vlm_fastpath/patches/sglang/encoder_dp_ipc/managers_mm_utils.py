"""Patch of ``sglang.srt.managers.mm_utils`` for lazy CUDA-IPC features on embedding-cache hits.

Kept apart from ``managers_mm_utils.py`` (the host-to-device patches of the same module) so each
can be reported and disabled on its own.

sglang-ipc-cache-hit-release
    Why: a CUDA-IPC feature left lazy for the encoder-DP owner (``sglang-ipc-deferred-
    reconstruction``) is never copied when its embedding is already cached, so nothing would
    move its pool slot's sync flag: the slot would leak.
    How: wraps the release's two cache lookups, ``_get_chunked_embedding_full`` and
    ``_get_chunked_embedding_by_item``. After a lookup, every lazy item that no owner has
    accounted for and that no later chunk will look up again is released once by attention-TP
    rank 0 with the TP size as consumer count (what the recycler waits for), and marked
    accounted for on every rank. "No later chunk": per item, the chunk holding the item's last
    token; for the full path (a miss re-encodes every item), the chunk holding the request's
    last multimodal token. Releasing earlier lets a later chunk miss (the embedding was evicted,
    or never fit the cache) read a slot the tokenizer has already reused: wrong pixels, and the
    flag moved after release (ci/sglang/HAZARD-cache-hit-then-miss.md). A lazy item that misses
    in a chunk that is not its last is copied by every rank, as the release does: the next
    chunk's miss set can assign it to another rank.
    Upstream: sglang PR #31227 (``_acknowledge_deferred_cuda_ipc_cache_hits``), 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MultimodalDataItem`` has ``can_defer_cuda_ipc_feature_reconstruction``.
"""

from __future__ import annotations

import functools

from ...core.base import Patch, PatchContext
from ...core.registry import register
from .._common import SGLANG_PREFIXES, module, require
from . import _switches
from ._owner import reconstruct_eagerly

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


def _cached(item_hash) -> bool | None:
    """Whether this rank's embedding cache holds ``item_hash`` right now (None: cannot tell).

    ``has`` reads without touching the LRU order, so the lookup that follows sees the cache as
    the release would have.
    """
    cache = getattr(module(MM_UTILS), "embedding_cache", None)
    has = getattr(cache, "has", None)
    if has is None:
        return None
    try:
        return bool(has(item_hash))
    except Exception:  # noqa: BLE001 - a cache we cannot read: treated as a miss
        return None


def _wrap_full(original):
    @functools.wraps(original)
    def _get_chunked_embedding_full(*args, **kwargs):
        out = original(*args, **kwargs)
        # A miss here re-encodes every item of the request, so an item may be read again until
        # the chunk that holds the request's last multimodal token: release hits only there.
        offsets = _arg(args, kwargs, 2, "items_offset")
        chunk_end = _arg(args, kwargs, 3, "extend_prefix_len") + _arg(
            args, kwargs, 4, "extend_seq_len"
        )
        if all(end < chunk_end for _, end in offsets):
            release_cache_hits(_arg(args, kwargs, 1, "embedding_items_per_req"))
        return out

    return _get_chunked_embedding_full


def _wrap_by_item(original):
    @functools.wraps(original)
    def _get_chunked_embedding_by_item(*args, **kwargs):
        items = _arg(args, kwargs, 1, "embedding_items_per_req")
        offsets = _arg(args, kwargs, 2, "items_offset")
        chunk_start = _arg(args, kwargs, 3, "extend_prefix_len")
        length = _arg(args, kwargs, 4, "extend_seq_len")
        finishing, continuing_misses = [], []
        if length > 0:
            chunk_end = chunk_start + length
            for item, (start, end) in zip(items, offsets, strict=False):
                if end < chunk_start or start >= chunk_end:
                    continue  # not looked up in this chunk
                if end < chunk_end:
                    finishing.append(item)  # its last token is in this chunk
                elif _switches.pending(item) and not _cached(item.hash):
                    continuing_misses.append(item)
        if continuing_misses:
            # Encoded now and possibly again in a later chunk (evicted meanwhile, or too big to
            # cache) by whichever rank the later miss set assigns it to: every rank copies it,
            # as the release does, so the slot is released only once nobody needs to read it.
            reconstruct_eagerly(continuing_misses, _arg(args, kwargs, 5, "device"))
        out = original(*args, **kwargs)
        # A hit of an item that continues into a later chunk is not released: that chunk looks
        # it up again and may miss, and a miss must read the slot (the later chunk releases it).
        release_cache_hits(finishing)
        return out

    return _get_chunked_embedding_by_item


@register
class IpcCacheHitReleasePatch(Patch):
    name = "sglang-ipc-cache-hit-release"
    engine = "sglang"
    versions = ">=0.5.12"
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
