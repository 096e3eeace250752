"""vLLM's chat utils (``_resolve_vision_chunk_items``) and ``vllm.multimodal.hasher``: a Kimi
image is hashed by its file's bytes.

vllm-vision-chunk-hash-bytes
    Why: the resolution of unified vision chunks hands the processor ``data.media`` and drops
    the ``MediaWithBytes`` around it, so vLLM hashes the decoded pixels of every Kimi image
    (36 MiB for a 12 MP photo) where it hashes every other model's images by their file.
    How: the wrapped resolution records each image wrapper's fields on its image
    (``adapters/encoded_source``); the wrapped ``MultiModalHasher.serialize_item`` hashes an
    image carrying that record as the wrapper, through vLLM's own ``MediaWithBytes`` branch.
    The processor still gets the same image object.
    Upstream: none. Applies to: vLLM >=0.16, open-ended; stands aside where the resolution or
    ``serialize_item`` has another shape, the resolution does not hand on the wrapper's own
    image, or vLLM's hash of an image wrapper reads its pixels.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from ...adapters import encoded_source
from ...core.base import Patch, PatchContext, signature_clause
from ...core.containment import contained
from ...core.registry import register

PATCH = "vllm-vision-chunk-hash-bytes"
HASHER = "vllm.multimodal.hasher"
MEDIA = "vllm.multimodal.media"
RESOLVE = "_resolve_vision_chunk_items"
RESOLVE_PARAMS = ("vision_chunk_items", "mm_processor", "vision_chunks_modality_order")
# Where the resolution lives, newest first: 0.33+, 0.32 (a module), 0.16-0.31.
HOMES = (
    "vllm.renderers.chat_utils.item_tracker",
    "vllm.renderers.chat_utils",
    "vllm.entrypoints.chat_utils",
)


@functools.cache
def resolution_home() -> str:
    """The module of the installed vLLM that holds the resolution, found by its file (nothing
    is imported: the import hook waits for this module); the newest home if none is found."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    for base in (getattr(spec, "submodule_search_locations", None) or ()):
        for name in HOMES:
            if Path(base, *name.split(".")[1:]).with_suffix(".py").is_file():
                return name
    return HOMES[0]


def make_resolve(original: Any) -> Any:
    """The resolution that first records, on each image it will unwrap, where it came from."""

    @contained(PATCH, original, user_errors=())
    def _resolve_vision_chunk_items(
        vision_chunk_items: Any, mm_processor: Any, vision_chunks_modality_order: Any
    ) -> Any:
        for item, modality in zip(
            vision_chunk_items, vision_chunks_modality_order, strict=False  # vLLM asserts equal
        ):
            if modality == "image" and isinstance(item, tuple) and item:
                encoded_source.remember(item[0])
        return original(vision_chunk_items, mm_processor, vision_chunks_modality_order)

    _resolve_vision_chunk_items.__wrapped__ = original  # type: ignore[attr-defined]
    _resolve_vision_chunk_items.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return _resolve_vision_chunk_items


def make_serialize_item(original: Any) -> classmethod:
    """``serialize_item`` that hashes a remembered image as the wrapper it came from; every
    other object, and the wrapper's own hashing, is vLLM's."""

    @contained(PATCH, original, user_errors=())
    def by_source(cls: type, obj: Any) -> Any:
        wrapper = encoded_source.rewrap(obj)
        return original(cls, obj if wrapper is None else wrapper)

    def serialize_item(cls: type, obj: Any) -> Any:
        if encoded_source.recorded(obj) is not None:
            return by_source(cls, obj)
        return original(cls, obj)

    serialize_item.__wrapped__ = original  # type: ignore[attr-defined]
    serialize_item.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return classmethod(serialize_item)


def _serialized(cls: type, obj: Any) -> bytes:
    return b"".join(bytes(chunk) for chunk in cls.serialize_item(obj))


def _probe_images() -> tuple[Any, Any]:
    from PIL import Image

    return Image.new("RGB", (8, 8), (1, 2, 3)), Image.new("RGB", (8, 8), (200, 100, 50))


@register
class VisionChunkHashPatch(Patch):
    name = PATCH
    engine = "vllm"
    versions = ">=0.16"
    backport = False
    upstream_pr = ""
    summary = (
        "a vision-chunk (Kimi) image is hashed by its file's bytes, as vLLM hashes other "
        "models' images (MediaWithBytes), not by its decoded pixels"
    )

    @property  # type: ignore[override]
    def trigger(self) -> str:
        return resolution_home()

    @property  # type: ignore[override]
    def modules(self) -> tuple[str, ...]:
        return (resolution_home(), HASHER)

    def _home(self) -> Any:
        return sys.modules[resolution_home()]

    def not_needed(self) -> str | None:
        if RESOLVE not in vars(self._home()):
            return f"{resolution_home()} has no {RESOLVE} (no unified vision chunks)"
        return None

    def _resolved_image(self, wrapper: Any) -> Any:
        """What the release's own resolution hands the processor for one image wrapper."""
        chunks, _ = vars(self._home())[RESOLVE]([(wrapper, None)], None, ["image"])
        chunk = chunks[0]
        return chunk.get("image") if isinstance(chunk, dict) else chunk

    def upstream_equivalent(self) -> str | None:
        try:
            wrapper_cls = importlib.import_module(MEDIA).MediaWithBytes
            wrapper = wrapper_cls(_probe_images()[0], b"probe")
            kept = self._resolved_image(wrapper) is wrapper
        except Exception:  # noqa: BLE001 - the contract names what does not fit
            return None
        if kept:
            return f"{RESOLVE} hands on the MediaWithBytes itself (hashed by its bytes)"
        return None

    def contract(self) -> str | None:
        home = self._home()
        clause = signature_clause(home, RESOLVE, RESOLVE_PARAMS)
        if clause:
            return clause
        try:
            hasher = importlib.import_module(HASHER)
            wrapper_cls = importlib.import_module(MEDIA).MediaWithBytes
        except (ImportError, AttributeError) as exc:
            return f"structure: {HASHER} or {MEDIA}.MediaWithBytes cannot be imported ({exc})"
        cls = getattr(hasher, "MultiModalHasher", None)
        raw = vars(cls).get("serialize_item") if cls is not None else None
        if not isinstance(raw, classmethod):
            return "structure: MultiModalHasher.serialize_item is not a classmethod"
        if list(inspect.signature(raw.__func__).parameters)[:2] != ["cls", "obj"]:
            return "structure: MultiModalHasher.serialize_item is not (cls, obj)"
        first, second = _probe_images()
        try:
            wrapper = wrapper_cls(first, b"probe")
            if self._resolved_image(wrapper) is not first:
                return f"behaviour: {RESOLVE} does not hand on the wrapper's own image"
            own = _serialized(cls, wrapper)
            if own != _serialized(cls, wrapper_cls(second, b"probe")):
                return "behaviour: vLLM's hash of an image in MediaWithBytes reads its pixels"
            if not encoded_source.remember(wrapper):
                return "behaviour: MediaWithBytes is not a dataclass of media and original_bytes"
            ours = make_serialize_item(raw.__func__).__func__
            if b"".join(bytes(c) for c in ours(cls, first)) != own:
                return "behaviour: the image rebuilt as its wrapper is hashed otherwise"
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run is a failed clause
            return f"behaviour: the probe failed ({type(exc).__name__}: {exc})"
        finally:
            vars(first).pop(encoded_source.ATTR, None)
        return None

    def apply(self, ctx: PatchContext) -> None:
        home = self._home()
        ctx.set_attr(home, RESOLVE, make_resolve(vars(home)[RESOLVE]))
        cls = sys.modules[HASHER].MultiModalHasher
        original = vars(cls)["serialize_item"].__func__
        ctx.set_attr(cls, "serialize_item", make_serialize_item(original))
