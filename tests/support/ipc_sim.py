"""TP ranks consuming CUDA-IPC features, simulated on the CPU (tests and benchmarks; not a patch).

Used by ``tests/engines/sglang/test_ipc_deferral.py`` (Kimi K2.5), ``test_ipc_deferral_qwen.py``
(Qwen-VL) and ``benchmarks/sglang_counts.py`` to count raw-feature copies under encoder data
parallelism on a release's own code.

Every simulated TP rank is a thread with its own copies of a request's items (as each scheduler
process deserializes them), each holding a ``RecordingProxy``: a subclass of the release's
``CudaIpcTensorTransportProxy`` that replaces only the CUDA internals (opening the IPC handle,
the device copy, the shared-memory flag) with CPU stand-ins and records every copy and every
change of the slot's shared sync flag. Requests go through the release's
``MultimodalInputs.from_processor_output``, its ``_get_chunked_embedding_by_item`` with its
embedding cache (one per rank), the real ``KimiK25ForConditionalGeneration.get_image_feature``
(or a Qwen-VL model's) and ``run_dp_sharded_mrope_vision_model`` (ranks simulated by the
attention-TP rank getters, a real all-gather across the threads), and pool slots are recycled
by the release's ``MmItemMemoryChunk.try_to_recycle``.

The engine stubs (server args, rank getters, per-rank embedding cache) are installed only while
a ``Cluster`` is ``installed()`` (``run`` does so itself) and restored on exit; nothing here
needs pytest. The doubles follow both interfaces: the releases before 0.5.16 (rank getters in
``dp_attention``, ``get_global_server_args``) and 0.5.16+ (``runtime_context.get_parallel`` /
``get_server_args``, the proxy's own ``_acknowledge_consumption``); on 0.5.16+ the tower says it
is on ``cuda:0`` (the release reconstructs IPC features only for CUDA devices) and each rank's
thread maps CUDA factory calls to the CPU (``CudaOnCpu``). When a slot has been recycled, the
tokenizer may already have written another image into it: a copy from a recycled slot reads
zeros (``Slot.stale_reads`` counts them). Nothing here imports SGLang at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

HIDDEN = 8
_FLAG_LOCK = threading.Lock()
_MISSING = object()


class Slot:
    """One pool slot: the shared sync flag every rank's proxy of one item points at."""

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.flag = np.zeros(1, dtype=np.float32)
        self.buffer_wrapper = self.flag  # what MmItemMemoryChunk reads
        self.increments: list[tuple[int, float]] = []  # (rank, amount)
        self.released = 0
        self.touched_after_release = 0
        self.stale_reads = 0  # copies made after the slot was recycled (they read zeros)


def recording_proxy_class(base):
    """A subclass of the release's proxy class with CPU stand-ins for its CUDA internals."""

    class RecordingProxy(base):
        copies: list[tuple[int, int]] = []  # (slot, rank)

        def __init__(self, tensor, slot: Slot, rank: int) -> None:  # no CUDA: no super()
            self.proxy_state = {
                "ipc_extra": {
                    "pool_handle": ("simulated-pool",),
                    "pool_byte_offset": 0,
                    "pool_device_index": 0,
                    "shape": (tensor.numel() * tensor.element_size(),),
                    "dtype": torch.int8,
                    "stride": (1,),
                    "storage_offset": 0,
                    "nbytes": tensor.numel() * tensor.element_size(),
                    "recons_shape": tensor.shape,
                    "recons_dtype": tensor.dtype,
                },
                "tensor_data": None,
            }
            self.reconstruct_tensor = None
            self.sync_data_meta = {"handle": f"slot-{slot.ident}", "shape": (1,),
                                   "dtype": "float32"}
            self.sync_buffer = None
            self._source, self._slot, self._rank = tensor, slot, rank

        @property
        def get_sync_flag(self):
            slot = self._slot
            if slot.released:
                slot.touched_after_release += 1
            rank = self._rank

            class _Flag(np.ndarray):
                def __iadd__(inner, amount):
                    with _FLAG_LOCK:  # the release holds a file lock around this
                        slot.flag[0] += amount
                        slot.increments.append((rank, float(amount)))
                    return inner

            return slot.flag.view(_Flag)

        def close_shm(self):
            self.sync_buffer = None

        def _reconstruct_from_ipc_extra(self, ipc_extra, *, use_cache, rebuild_device_idx):
            raw = self._source.contiguous().view(torch.int8).view(-1)
            if self._slot.released:  # the pool handed the slot to another image
                self._slot.stale_reads += 1
                raw = torch.zeros_like(raw)
            return raw, torch.device("cpu"), ("simulated-pool", rebuild_device_idx), None

        def _copy_slice_tensor_to_target(self, slice_tensor, rebuild_device, recons_shape,
                                         recons_dtype, *rest):
            out = torch.empty(recons_shape, dtype=recons_dtype)
            out.view(torch.int8).view(-1).copy_(slice_tensor)
            RecordingProxy.copies.append((self._slot.ident, self._rank))
            acknowledge = getattr(base, "_acknowledge_consumption", None)
            if acknowledge is not None:  # 0.5.16+: the release's own counting (consumer_count)
                acknowledge(self, rest[0] if rest else 1)
                return out
            flag = self.get_sync_flag  # up to 0.5.15: the release's +1 per copy
            flag += 1
            self.close_shm()
            return out

        def reconstruct_on_target_device(self, rebuild_device_idx, *args, **kwargs):
            if self.reconstruct_tensor is not None:  # the release's same-device cache
                return self.reconstruct_tensor
            return super().reconstruct_on_target_device(rebuild_device_idx, *args, **kwargs)

    return RecordingProxy


class FakeTower(torch.nn.Module):
    """MoonViT's interface to the DP sharding: packed patches in, (N/4, 4, hidden) out."""

    merge_kernel_size = (2, 2)

    def __init__(self) -> None:
        super().__init__()
        self.config = types.SimpleNamespace(hidden_size=HIDDEN)
        self.patch_embed = types.SimpleNamespace(
            proj=types.SimpleNamespace(weight=torch.zeros(1, dtype=torch.float32))
        )
        # Elementwise, so a patch's result does not depend on which images share its batch:
        # DP shards and the non-DP batch give bit-identical embeddings.
        self.scale = torch.nn.Parameter(torch.randn(HIDDEN))
        self.shift = torch.nn.Parameter(torch.randn(HIDDEN))
        self.device = torch.device("cpu")

    def forward(self, pixel_values, grid_thws):
        flat = pixel_values.reshape(pixel_values.shape[0], -1)[:, :HIDDEN]
        out = flat * self.scale + self.shift
        return [part.reshape(-1, 4, HIDDEN) for part in out.split(
            [t * h * w for t, h, w in grid_thws.tolist()])]


def new_runtime_api() -> bool:
    """0.5.16+: parallel state and server args come from ``sglang.srt.runtime_context``."""
    import importlib.util

    import sglang.srt.multimodal.mm_utils as mm

    return importlib.util.find_spec("sglang.srt.runtime_context") is not None and hasattr(
        mm, "get_parallel"
    )


# modules whose ``get_parallel``/``get_server_args`` globals the 0.5.16+ stubs replace
_RUNTIME_USERS = (
    "sglang.srt.runtime_context",
    "sglang.srt.managers.mm_utils",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.multimodal.mm_utils",
    "sglang.srt.models.kimi_k25",
    "sglang.srt.utils.cuda_ipc_transport_utils",
)


class CudaOnCpu(torch.overrides.TorchFunctionMode):
    """Maps ``device=cuda...`` of torch calls to the CPU (0.5.16+ code under a CUDA tower)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.to:
            args = tuple("cpu" if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return False


class _Parallel:
    """0.5.16+'s ``get_parallel()`` as one simulated rank sees it."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    @property
    def attn_tp_size(self) -> int:
        return self._cluster.tp

    tp_size = attn_tp_size

    @property
    def attn_tp_rank(self) -> int:
        return self._cluster.local.rank

    tp_rank = attn_tp_rank

    @property
    def attn_tp_group(self) -> Cluster:
        return self._cluster


class Cluster:
    """TP ranks as threads of one process: thread-local rank getters, a real all-gather and
    broadcast across the threads (a barrier: a rank that skipped one would break it), one
    embedding cache per rank."""

    def __init__(self, tp: int, *, encoder_dp: bool = True, cache_bytes: int = 1 << 30) -> None:
        import importlib
        import sys

        import sglang.srt.layers.dp_attention as dpa
        import sglang.srt.managers.mm_utils as mm_utils
        import sglang.srt.server_args as sa
        import sglang.srt.utils.cuda_ipc_transport_utils as transport

        self.tp, self.gathers = tp, []
        self.new_api = new_runtime_api()
        self.local = threading.local()
        self.barrier = threading.Barrier(tp, timeout=60)
        self.parts: list = [None] * tp
        args = types.SimpleNamespace(tp_size=tp, mm_enable_dp_encoder=encoder_dp)
        self.server_args = args
        self.caches = []
        saved = getattr(mm_utils, "embedding_cache", None)
        for _ in range(tp):
            mm_utils.init_mm_embedding_cache(cache_bytes)
            self.caches.append(mm_utils.embedding_cache)
        mm_utils.embedding_cache = saved
        cluster = self

        class PerRankCache:
            def __getattr__(self, name):
                return getattr(cluster.caches[cluster.local.rank], name)

        self.stubs = [
            (sa, "get_global_server_args", lambda: args),
            (transport, "get_global_server_args", lambda: args),
            (dpa, "get_attention_tp_size", lambda: self.tp),
            (dpa, "get_attention_tp_rank", lambda: self.local.rank),
            (dpa, "get_attention_tp_group", lambda: self),
            (torch.cuda, "current_device", lambda: 0),
            (mm_utils, "embedding_cache", PerRankCache()),
        ]
        if self.new_api:
            parallel = _Parallel(self)
            for name in _RUNTIME_USERS:
                mod = sys.modules.get(name) or importlib.import_module(name)
                if hasattr(mod, "get_parallel"):
                    self.stubs.append((mod, "get_parallel", lambda: parallel))
                if hasattr(mod, "get_server_args"):
                    self.stubs.append((mod, "get_server_args", lambda: args))

    @contextlib.contextmanager
    def installed(self) -> Iterator[Cluster]:
        """The engine stubs of this cluster, restored (or removed) on exit."""
        saved = [(owner, name, owner.__dict__.get(name, _MISSING))
                 for owner, name, _ in self.stubs]
        try:
            for owner, name, value in self.stubs:
                setattr(owner, name, value)
            yield self
        finally:
            for owner, name, value in reversed(saved):
                if value is _MISSING:
                    with contextlib.suppress(AttributeError):
                        delattr(owner, name)
                else:
                    setattr(owner, name, value)

    def all_gather(self, tensor, dim=0):
        rank = self.local.rank
        self.gathers.append(rank)
        self.parts[rank] = tensor
        self.barrier.wait()
        out = torch.cat(list(self.parts), dim=dim)
        self.barrier.wait()  # nobody overwrites a part before everyone has read them
        return out

    def broadcast(self, tensor, src=0):
        rank = self.local.rank
        self.gathers.append(rank)
        if rank == src:
            self.parts[src] = tensor
        self.barrier.wait()
        if rank != src:
            tensor.copy_(self.parts[src])
        self.barrier.wait()
        return tensor

    def evict(self, hashes) -> None:
        """Drop these embeddings from every rank's cache (what other requests' inserts do)."""
        for cache in self.caches:
            for item_hash in hashes:
                if cache.has(item_hash):
                    cache.free(item_hash, None)

    def run(self, work):
        """``work(rank)`` on every rank concurrently; returns the results by rank."""
        results, errors = [None] * self.tp, []

        def target(rank):
            self.local.rank = rank
            try:
                if self.new_api:
                    with CudaOnCpu():
                        results[rank] = work(rank)
                else:
                    results[rank] = work(rank)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
                self.barrier.abort()

        with self.installed():
            threads = [threading.Thread(target=target, args=(r,)) for r in range(self.tp)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]
        return results


def kimi_model(encoder_dp: bool = True):
    """A ``KimiK25ForConditionalGeneration`` with a small stand-in tower.

    On 0.5.16+ the tower reports ``cuda:0`` (the release reconstructs IPC features only for a
    CUDA tower; ``Cluster.run`` keeps the tensors on the CPU).
    """
    import sglang.srt.models.kimi_k25 as kimi

    model = kimi.KimiK25ForConditionalGeneration.__new__(kimi.KimiK25ForConditionalGeneration)
    torch.nn.Module.__init__(model)
    torch.manual_seed(0)
    model.vision_tower = FakeTower()
    if new_runtime_api():
        model.vision_tower.device = torch.device("cuda", 0)
    model.mm_projector = lambda x: x.reshape(x.shape[0], -1) * 2.0
    model.use_data_parallel = encoder_dp
    return model


class FakeQwenVisual(torch.nn.Module):
    """The Qwen-VL vision tower's interface to the DP sharding: raw patches (N, 1176) in,
    (N/4, hidden) merged tokens out."""

    spatial_merge_size = 2
    out_hidden_size = HIDDEN
    embed_dim = 32  # not the raw patch width: Qwen2.5-VL runs the tower
    width = 1176

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4 * self.width, HIDDEN)

    @property
    def dtype(self):
        return torch.float32

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, pixel_values, grid_thw):
        return self.lin(pixel_values.reshape(-1, 4 * self.width))


# family: (model module, class)
QWEN_FAMILIES = {
    "qwen2_5_vl": ("sglang.srt.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3_vl": ("sglang.srt.models.qwen3_vl", "Qwen3VLForConditionalGeneration"),
    "qwen3_vl_moe": ("sglang.srt.models.qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration"),
}


def qwen_model(family: str):
    """A Qwen-VL model (``QWEN_FAMILIES``) with a small stand-in tower, encoder DP on."""
    import importlib

    module_name, class_name = QWEN_FAMILIES[family]
    cls = getattr(importlib.import_module(module_name), class_name)
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    torch.manual_seed(0)
    model.visual = FakeQwenVisual()
    model.config = types.SimpleNamespace(vision_config=types.SimpleNamespace(hidden_size=32))
    model.use_data_parallel = True
    return model


def random_requests(n_requests: int, seed: int, tps=(1, 2, 4, 8)):
    """(tp, [(hash, grid)], chunk split) per request; hashes repeat, so the cache gets hits."""
    rng = random.Random(seed)
    grids = [(1, 2, 2), (1, 2, 4), (1, 4, 4), (1, 4, 2), (1, 6, 2)]
    out = []
    for _ in range(n_requests):
        tp = rng.choice(tps)
        n = rng.randint(1, 8)
        images = [(rng.randrange(40), rng.choice(grids)) for _ in range(n)]
        out.append((tp, images, rng.random()))
    return out


def distinct_images_request(tp: int, n_images: int, first_hash: int = 100):
    """One request of ``n_images`` distinct (never cached) images, prefilled in two chunks."""
    return (tp, [(first_hash + i, (1, 2, 4)) for i in range(n_images)], 0.5)


@dataclasses.dataclass
class SimRun:
    slots: list[Slot]
    outputs: list[list[torch.Tensor]]  # per request, the embeddings per rank
    copies: list[int]  # raw-feature copies per request (all ranks)
    clusters: dict[int, Cluster]  # by TP size


def run_requests(requests, *, patched: bool, family: str = "kimi_k25", encoder_dp: bool = True,
                 entry: str = "by_item", between_chunks=None, cache_bytes: int = 1 << 30,
                 tokenizer_dp: bool | None = None) -> SimRun:
    """Run ``requests`` through the release's code (apply or revert the patches beforehand).

    ``patched``: the Kimi K2.5 processor's items get the deferral marker through our
    ``mark_deferrable`` (``sglang-kimi-k25-defer-ipc-marker``), as the patched processor does.
    ``family``: ``"kimi_k25"`` or a ``QWEN_FAMILIES`` key (the Qwen-VL processor's marker,
    ``sglang-qwen-vl-defer-ipc-marker``, and raw Qwen patches of width 1176).
    ``encoder_dp``: the server's ``--mm-enable-dp-encoder`` (off: the release's non-DP path).
    ``entry``: the release function each prefill chunk goes through: ``"by_item"``
    (``_get_chunked_embedding_by_item``), ``"prefill"`` (``_get_chunked_prefill_embedding``,
    which picks the path itself; on 0.5.16+ its CUDA path batches misses across requests) or
    ``"full"`` (``_get_chunked_embedding_full``).
    ``between_chunks(cluster, req_slots)``: run once (by rank 0, the others waiting) between a
    request's two chunks, e.g. to recycle slots and evict cached embeddings.
    ``tokenizer_dp``: the tokenizer's view of ``--mm-enable-dp-encoder`` when it differs from
    the scheduler's (``encoder_dp``): whether the marker is set.
    """
    import sglang.srt.managers.mm_utils as mm_utils
    import sglang.srt.managers.schedule_batch as sb
    import sglang.srt.utils.cuda_ipc_transport_utils as transport

    from tests.support import sglang_cpu as _testing
    from vlm_fastpath.patches.sglang.encoder_dp_ipc.multimodal_processors_base_processor import (
        mark_deferrable,
        mark_qwen_deferrable,
    )

    proxy_cls = recording_proxy_class(transport.CudaIpcTensorTransportProxy)
    proxy_cls.copies = []
    if family == "kimi_k25":
        model, mark, patch_shape = kimi_model(encoder_dp), mark_deferrable, (3, 2, 2)
        processor = type("KimiK2_5VLImageProcessor", (), {})()
    else:
        model, mark = qwen_model(family), mark_qwen_deferrable
        model.use_data_parallel = encoder_dp
        patch_shape = (FakeQwenVisual.width,)
        processor = type("QwenVLImageProcessor", (), {})()
        processor.hf_config = types.SimpleNamespace(architectures=[QWEN_FAMILIES[family][1]])
    marker_dp = encoder_dp if tokenizer_dp is None else tokenizer_dp
    processor.server_args = types.SimpleNamespace(mm_enable_dp_encoder=marker_dp)
    run = SimRun([], [], [], {})
    lookup = _chunk_lookup(mm_utils.__dict__, entry)
    for tp, images, split in requests:
        cluster = run.clusters.get(tp) or run.clusters.setdefault(
            tp, Cluster(tp, encoder_dp=encoder_dp, cache_bytes=cache_bytes))
        features = [torch.randn(t * h * w, *patch_shape,
                                generator=torch.Generator().manual_seed(hh))
                    for hh, (t, h, w) in images]
        offsets, total, cut = layout(images, split)
        req_slots = [Slot(len(run.slots) + i) for i in range(len(images))]
        run.slots.extend(req_slots)
        before = len(proxy_cls.copies)

        def work(rank, images=images, features=features, req_slots=req_slots,
                 offsets=offsets, total=total, cut=cut, cluster=cluster):
            items = []
            for (hh, (t, h, w)), feature, slot, off in zip(images, features, req_slots, offsets,
                                                          strict=True):
                item = _testing.make_item(
                    sb.MultimodalDataItem, sb.Modality.IMAGE, proxy_cls(feature, slot, rank),
                    {"image_grid_thw": torch.tensor([[t, h, w]])},
                )
                item.hash = 1_000_003 + hh
                item.set_pad_value()
                item.offsets = [off]
                items.append(item)
            if patched:
                mark(processor, items, {"SGL_USE_CUDA_IPC": True})
            obj = types.SimpleNamespace(mm_items=items, padded_input_ids=None)
            mm_inputs = sb.MultimodalInputs.from_processor_output(obj)
            got = []
            with torch.no_grad():
                for index, (prefix, length) in enumerate(((0, cut), (cut, total - cut))):
                    if index == 1 and between_chunks is not None:
                        cluster.barrier.wait()
                        if rank == 0:
                            between_chunks(cluster, req_slots)
                        cluster.barrier.wait()
                    emb = lookup(model.get_image_feature, mm_inputs.mm_items, offsets, prefix,
                                 length)
                    if emb is not None:
                        got.append(emb)
            return torch.cat(got)

        run.outputs.append(cluster.run(work))
        run.copies.append(len(proxy_cls.copies) - before)
        with cluster.installed():  # the recycler reads the server's tp_size
            recycle(req_slots, transport)
    return run


def layout(images, split: float):
    """(item offsets, prompt length, first chunk's length) of a simulated request."""
    offsets, start = [], 5
    for _, (t, h, w) in images:
        n_tok = t * h * w // 4
        offsets.append((start, start + n_tok - 1))
        start += n_tok + 3
    return offsets, start, max(1, min(start - 1, int(start * split)))


def straddling(images, split: float) -> list[int]:
    """Indices of the images whose tokens the chunk boundary splits."""
    offsets, _, cut = layout(images, split)
    return [i for i, (start, end) in enumerate(offsets) if start < cut <= end]


def _chunk_lookup(mm_g, entry: str):
    """``lookup(embed, items, offsets, prefix, length) -> chunk embedding | None``."""
    cpu = torch.device("cpu")
    ids = torch.zeros(1, dtype=torch.long)
    if entry == "by_item":
        func = mm_g["_get_chunked_embedding_by_item"]
        return lambda embed, items, offsets, prefix, length: func(
            embed, items, offsets, prefix, length, cpu)
    if entry == "full":
        func = mm_g["_get_chunked_embedding_full"]
        return lambda embed, items, offsets, prefix, length: func(
            embed, items, offsets, prefix, length, ids, cpu)[0]
    if entry == "prefill":
        func = mm_g["_get_chunked_prefill_embedding"]
        return lambda embed, items, offsets, prefix, length: func(
            embed, items, [0, len(items)], [prefix], [length], [offsets], ids)[0]
    raise ValueError(f"unknown entry {entry!r}")


def recycle(req_slots, transport: Any) -> None:
    """The release's ``MmItemMemoryChunk.try_to_recycle`` on each slot."""
    for slot in req_slots:
        chunk = transport.MmItemMemoryChunk((0, 1), slot)
        if chunk.try_to_recycle():
            slot.released += 1


def copies_table(tps=(2, 4, 8), images=range(1, 9)) -> dict[str, dict[str, dict[str, int]]]:
    """Raw-feature copies (all ranks) of one request per TP size x image count.

    ``{"TP8": {"4": {"unpatched": 32, "patched": 4}}}``; applies and reverts the SGLang
    patches itself and leaves them reverted.
    """
    from vlm_fastpath.patches import REGISTRY

    table: dict[str, dict[str, dict[str, int]]] = {}
    try:
        for label in ("unpatched", "patched"):
            REGISTRY.revert(engine="sglang")
            if label == "patched":
                REGISTRY.apply(engine="sglang")
            for tp in tps:
                for n in images:
                    run = run_requests([distinct_images_request(tp, n)],
                                       patched=label == "patched")
                    if any(s.released != 1 for s in run.slots):
                        raise AssertionError(f"TP{tp} x{n} {label}: a slot leaked")
                    table.setdefault(f"TP{tp}", {}).setdefault(str(n), {})[label] = run.copies[0]
    finally:
        REGISTRY.revert(engine="sglang")
    return table


# The chunk-boundary scenarios (ci/sglang/HAZARD-cache-hit-then-miss.md). Each returns the SimRun
# of the release's code as it stands (patches applied or not, decided by the caller).
X_IMAGE, Y_IMAGE = 7, 8  # hash seeds
X_GRID, Y_GRID = (1, 4, 4), (1, 4, 6)  # 4 and 6 tokens; Y is the larger image


def recycle_and_evict(hashes, slot_ident=None):
    """``between_chunks``: the pool recycles what is releasable, other requests evict
    ``hashes`` (image hash seeds; also their combined keys, which the full path caches under);
    only for the request whose first slot is ``slot_ident``."""

    def between(cluster, req_slots):
        import sglang.srt.utils.cuda_ipc_transport_utils as transport

        if slot_ident is not None and req_slots[0].ident != slot_ident:
            return
        recycle(req_slots, transport)
        keys = [1_000_003 + h for h in hashes]
        combine = type(cluster.caches[0]).combine_hashes  # the full path's key
        cluster.evict([*keys, combine(keys), *(combine([key]) for key in keys)])

    return between


def hit_then_miss(tp: int, *, patched: bool, entry: str = "by_item",
                  encoder_dp: bool = True) -> SimRun:
    """Request 0 caches image X. Request 1 sends X again (a new slot); its first chunk ends
    inside X: a cache hit. Between the chunks the pool recycles what it may and X is evicted;
    the second chunk misses X and has to read its slot."""
    requests = [(tp, [(X_IMAGE, X_GRID)], 0.95), (tp, [(X_IMAGE, X_GRID)], 0.5)]
    return run_requests(requests, patched=patched, entry=entry, encoder_dp=encoder_dp,
                        between_chunks=recycle_and_evict([X_IMAGE], slot_ident=1))


def miss_then_miss(tp: int, *, patched: bool, entry: str = "by_item",
                   encoder_dp: bool = True) -> SimRun:
    """One request: X spans the chunk boundary, Y lies in the second chunk. The first chunk
    misses X alone (rank 0 owns it); X is evicted between the chunks; the second chunk misses
    X and Y, and the larger Y now takes rank 0, so rank 1 owns X."""
    requests = [(tp, [(X_IMAGE, X_GRID), (Y_IMAGE, Y_GRID)], 0.34)]
    return run_requests(requests, patched=patched, entry=entry, encoder_dp=encoder_dp,
                        between_chunks=recycle_and_evict([X_IMAGE, Y_IMAGE]))


def hit_only(tp: int, *, patched: bool, entry: str = "by_item",
             encoder_dp: bool = True) -> SimRun:
    """Request 0 caches image X; request 1 sends X again and hits it (no miss follows)."""
    requests = [(tp, [(X_IMAGE, X_GRID)], 0.95), (tp, [(X_IMAGE, X_GRID)], 0.95)]
    return run_requests(requests, patched=patched, entry=entry, encoder_dp=encoder_dp)
