"""vLLM hashes a large multimodal item (a decoded video) with blake3 on several threads.

Why: before it looks up or processes an item, vLLM's processor hashes it
(``MultiModalHasher.hash_kwargs``, blake3 by default) for its caches. A decoded clip is
hashed on its frames: 32 frames of 1280x720 are 88 MB, one single-threaded ``update`` of
19 ms, about as long as vlm-fastpath's whole video preprocessing of the same clip
(benchmarks/results/vllm_qwen_video.md). Every release hashes decoded frames passed as
arrays (the offline ``LLM`` API); up to 0.26 the server's own video loader hands on frames
too (from 0.27 it wraps them with the file's bytes, and a file smaller than its frames is
hashed instead).
How: blake3's tree hash gives the same digest on any number of threads. The patch wraps
``hash_kwargs`` to estimate the item's bytes first (arrays, tensors, bytes, images, their
containers; cheap, no copy); at or above ``MIN_BYTES`` the hasher vLLM then asks
``_get_hasher_factory`` for is a blake3 hasher with its own pool of
``VLM_FASTPATH_HASH_THREADS`` threads (default: the usable CPUs, at most 4). Below it, and
for sha256/sha512, vLLM's hasher is untouched. vLLM's serialization, ordering and digest
stay its own; a contract probe checks the digest on this release's own chunk stream.
Upstream PR: none.
Versions: vLLM >=0.15 (every release the sweep covers has ``_get_hasher_factory`` and
``hash_kwargs``), open-ended: the contract decides.
Delete when: vLLM hashes large items on several threads itself.
"""

PATCH_MODULES = ("multimodal_hasher",)
