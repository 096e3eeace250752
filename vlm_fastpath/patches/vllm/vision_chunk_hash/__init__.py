"""vLLM hashes a Kimi image by its file's bytes, as it hashes every other model's images.

Why: vLLM keys its processor caches and prefix caching by a hash of each multimodal item. An
image it loads is hashed by the encoded file (``MediaWithBytes``: a few MB of blake3); but
models with unified vision chunks (Kimi K2.5/K2.6/K2.7) get their images unwrapped first
(``_resolve_vision_chunk_items`` keeps only ``.media``), so each is hashed by its decoded pixels:
36 MiB for a 12 MP photo, the largest cost of a Kimi image request in the API server after
decoding once the processor is fast (benchmarks/results/frontend.md).
How: ``renderers_chat_utils`` wraps ``_resolve_vision_chunk_items`` to record, on each image it
unwraps, the wrapper's other fields (``adapters/encoded_source``), and ``MultiModalHasher
.serialize_item`` to hash an image carrying that record as the wrapper it came from, through
vLLM's own branch for ``MediaWithBytes``: vLLM's rule (image id, ``io_config``, bytes) and its
key. Identical files keep identical keys; the processor cache and prefix caching work by key.
Upstream PR: none.
Versions: vLLM >=0.16 (the first release with unified vision chunks), open-ended: the contract
decides; "upstream" where the resolution hands the wrapper on itself.
Delete when: vLLM keeps the encoded bytes of vision-chunk images for hashing.
"""

PATCH_MODULES = ("renderers_chat_utils",)
