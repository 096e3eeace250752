"""vLLM ``vllm.multimodal.hasher``: blake3 on several threads for a large item, same digest.

vllm-threaded-mm-hash
    Why: a decoded clip's frames are hashed in one single-threaded blake3 ``update`` (88 MB,
    19 ms for 32 frames of 1280x720), as long as its whole preprocessing with vlm-fastpath.
    How: ``MultiModalHasher.hash_kwargs`` estimates its items' bytes (:func:`payload_bytes`);
    from :data:`MIN_BYTES` on, the hasher it gets from the module's ``_get_hasher_factory``
    is blake3 with its own pool of :func:`hash_threads` threads (a tree hash: the same
    digest on any thread count). Everything else, sha256/sha512 included, is vLLM's.
    Upstream: none. Applies to: vLLM >=0.15, open-ended; stands aside where ``hash_kwargs``
    does not build its hasher from ``_get_hasher_factory``, blake3 is missing, or the
    threaded digest of this release's own chunk stream differs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .... import settings
from ...core.base import Patch, PatchContext, signature_clause, source_text
from ...core.containment import contained
from ...core.registry import register

HASHER = "vllm.multimodal.hasher"
PATCH = "vllm-threaded-mm-hash"
# Below this, a per-hasher pool's start and joins cost what the threads save (2 cores, quiet,
# medians: 8 MB 1.33 ms on one thread against 1.44 on two; 16 MB 3.19 against 1.87; 88 MB
# 18.4 against 9.9, or 10.9 as 32 frame-sized updates).
MIN_BYTES = 16 << 20
MAX_DEFAULT_THREADS = 4  # blake3 reads ~5 GB/s a thread: a few threads meet memory bandwidth
MAX_VISITS = 4096  # objects an estimate looks at: a long list of numbers stays cheap

_state = threading.local()  # .threads: the pool size for the hasher this thread asks for next


def hash_threads() -> int:
    """``VLM_FASTPATH_HASH_THREADS`` when set, else the usable CPUs capped at
    :data:`MAX_DEFAULT_THREADS` (1: vLLM's own single thread)."""
    chosen = settings.hash_threads()
    if chosen is not None:
        return chosen
    from ....imaging.resize_pool import available_cpus

    return min(MAX_DEFAULT_THREADS, available_cpus())


def payload_bytes(values: Iterable[Any], enough: int) -> int:
    """About how many bytes vLLM's serializer feeds the hasher for ``values``; counting stops
    at ``enough``. Arrays, tensors and buffers count their bytes, PIL images their pixels, a
    ``MediaWithBytes`` the smaller of its media and its encoded bytes (what vLLM hashes);
    lists, tuples and dicts their elements; an image that remembers its file (``encoded_source``)
    that file's bytes; anything else nothing. A wrong estimate costs
    time, never the digest."""
    from PIL import Image

    from ...adapters.encoded_source import encoded_size

    stack = list(values)
    total = visits = 0
    while stack and total < enough and visits < MAX_VISITS:
        obj = stack.pop()
        visits += 1
        if isinstance(obj, (bytes, bytearray)):
            total += len(obj)
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj[:MAX_VISITS])
        elif isinstance(obj, dict):
            stack.extend(list(obj.values())[:MAX_VISITS])
        elif isinstance(obj, Image.Image):
            encoded = encoded_size(obj)  # hashed by its file (vllm-vision-chunk-hash-bytes)
            total += encoded if encoded is not None else (
                obj.width * obj.height * len(obj.getbands()))
        elif hasattr(obj, "media") and hasattr(obj, "original_bytes"):
            encoded = obj.original_bytes
            total += min(payload_bytes((obj.media,), enough),
                         len(encoded) if isinstance(encoded, (bytes, bytearray)) else enough)
        else:
            size = getattr(obj, "nbytes", None)  # numpy arrays, torch tensors, memoryviews
            if isinstance(size, int):
                total += size
    return total


class GatheredUpdates:
    """A hasher whose small updates reach it as one: each ``update`` of a blake3 hasher with
    a pool hands work to the pool's threads, about 13 us even for 16 bytes, and vLLM feeds a
    clip with its metadata as some 160 chunks (measured: 160 small updates 0.02 ms on one
    thread, 2.0 ms through a pool of two; ``hash_kwargs`` of 32x1280x720 frames 14.1 ms
    against 9.5 for the frames alone). The same bytes in the same order: the same digest."""

    SMALL = 64 << 10  # an update below this waits, copied, for the next large one

    def __init__(self, hasher: Any) -> None:
        self._hasher = hasher
        self._pending = bytearray()

    def update(self, data: Any) -> GatheredUpdates:
        try:
            size = memoryview(data).nbytes
        except TypeError:
            size = self.SMALL  # not a buffer: the hasher decides what to do with it
        if size < self.SMALL:
            try:
                self._pending += data
                return self
            except (TypeError, BufferError, ValueError):
                pass
        self._flush()
        self._hasher.update(data)
        return self

    def _flush(self) -> None:
        if self._pending:
            self._hasher.update(self._pending)
            self._pending = bytearray()

    def hexdigest(self, *args: Any, **kwargs: Any) -> str:
        self._flush()
        return self._hasher.hexdigest(*args, **kwargs)

    def digest(self, *args: Any, **kwargs: Any) -> bytes:
        self._flush()
        return self._hasher.digest(*args, **kwargs)


def threaded_hasher(blake3: Any, threads: int) -> Any:
    """A blake3 hasher with its own pool of ``threads`` threads (none shared, so nothing is
    left for a forked child to miss), small updates gathered (:class:`GatheredUpdates`); or
    vLLM's single-threaded one if no pool can start."""
    try:
        return GatheredUpdates(blake3(max_threads=threads))
    except Exception:  # noqa: BLE001 - no threads to be had: the plain hasher, same digest
        return blake3()


def make_get_hasher_factory(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_get_hasher_factory`` whose blake3 factory makes a threaded hasher while this thread
    is inside a large item's ``hash_kwargs``; other algorithms are the original's."""
    from blake3 import blake3

    def factory(*args: Any, **kwargs: Any) -> Any:
        threads = getattr(_state, "threads", 1)
        if threads > 1 and not args and not kwargs:
            return threaded_hasher(blake3, threads)
        return blake3(*args, **kwargs)

    factory.__vlm_fastpath_original__ = blake3  # type: ignore[attr-defined]

    def _get_hasher_factory(algorithm: Any) -> Any:
        made = original(algorithm)
        return factory if made is blake3 else made

    _get_hasher_factory.__wrapped__ = original  # type: ignore[attr-defined]
    _get_hasher_factory.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return _get_hasher_factory


def make_hash_kwargs(original: Callable[..., str]) -> classmethod:
    """``hash_kwargs`` (the function under vLLM's classmethod) that marks this thread's next
    hasher threaded when its items are large; the hashing itself stays vLLM's."""

    @contained(PATCH, original, user_errors=())
    def hash_kwargs(cls: type, *args: Any, **kwargs: Any) -> str:
        # the estimate first: the thread count reads the affinity mask and the cgroup quota
        # (~0.17 ms), which only a large item needs
        if payload_bytes(kwargs.values(), MIN_BYTES) < MIN_BYTES:
            return original(cls, *args, **kwargs)
        threads = hash_threads()
        if threads <= 1:
            return original(cls, *args, **kwargs)
        previous = getattr(_state, "threads", 1)
        _state.threads = threads
        try:
            return original(cls, *args, **kwargs)
        finally:
            _state.threads = previous

    hash_kwargs.__wrapped__ = original  # type: ignore[attr-defined]
    hash_kwargs.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return classmethod(hash_kwargs)


def probe_mismatch(hasher_cls: type, threads: int = 2) -> str | None:
    """``behaviour: ...`` unless the hasher :func:`threaded_hasher` makes (blake3 on
    ``threads`` threads, small updates gathered) digests this release's own chunk stream of a
    probe video (frames over several blake3 chunks, plus metadata) as vLLM's
    single-threaded hasher does."""
    import numpy as np
    from blake3 import blake3

    frames = np.arange(4 * 256 * 256 * 3, dtype=np.uint32).astype(np.uint8)
    probe = (frames.reshape(4, 256, 256, 3), {"fps": 2.0, "frames_indices": [0, 1, 2, 3]})
    chunks = list(hasher_cls.iter_item_to_bytes("video", probe))
    single, threaded = blake3(), threaded_hasher(blake3, threads)
    for chunk in chunks:
        single.update(chunk)
        threaded.update(chunk)
    if single.hexdigest() != threaded.hexdigest():
        return "behaviour: blake3 on several threads gave another digest of the probe video"
    return None


@register
class ThreadedMmHashPatch(Patch):
    name = PATCH
    engine = "vllm"
    versions = ">=0.15"
    backport = False
    trigger = HASHER
    modules = (HASHER,)
    upstream_pr = ""
    summary = (
        "MultiModalHasher.hash_kwargs hashes an item of 16 MiB or more (a decoded video) with "
        "blake3 on several threads: the same digest"
    )

    def not_needed(self) -> str | None:
        hasher = sys.modules[HASHER]
        if getattr(hasher, "MultiModalHasher", None) is None:
            return f"{HASHER} has no MultiModalHasher"
        return None

    def contract(self) -> str | None:
        hasher = sys.modules[HASHER]
        clause = signature_clause(hasher, "_get_hasher_factory", ("algorithm",))
        if clause:
            return clause
        cls = hasher.MultiModalHasher
        raw = cls.__dict__.get("hash_kwargs")
        if not isinstance(raw, classmethod):
            return "structure: MultiModalHasher.hash_kwargs is not a classmethod"
        if not callable(getattr(cls, "iter_item_to_bytes", None)):
            return "structure: MultiModalHasher has no iter_item_to_bytes"
        source = source_text(raw.__func__)
        if not ("_get_hasher_factory(" in source and "hasher_factory()" in source
                and ".update(" in source and ".hexdigest()" in source):
            return ("structure: MultiModalHasher.hash_kwargs does not make its hasher by "
                    "_get_hasher_factory(...)() and update it")
        try:
            import blake3
        except ImportError:
            return "dependency: blake3 is not installed"
        if hasher.__dict__["_get_hasher_factory"]("blake3") is not blake3.blake3:
            return "behaviour: _get_hasher_factory('blake3') is not blake3.blake3"
        return probe_mismatch(cls)

    def apply(self, ctx: PatchContext) -> None:
        hasher = sys.modules[HASHER]
        ctx.set_attr(hasher, "_get_hasher_factory",
                     make_get_hasher_factory(hasher.__dict__["_get_hasher_factory"]))
        cls = hasher.MultiModalHasher
        ctx.set_attr(cls, "hash_kwargs", make_hash_kwargs(cls.__dict__["hash_kwargs"].__func__))
