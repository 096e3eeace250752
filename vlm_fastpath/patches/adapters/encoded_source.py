"""A decoded image that remembers the file it was decoded from, so it can be hashed by it.

vLLM keys an image it loaded by its file's bytes: ``MediaWithBytes(media, original_bytes,
...)`` carries both, and its hasher reads the bytes (a few MB) instead of the pixels (36 MiB
for a 12 MP photo). Where vLLM unwraps the image before hashing (Kimi's vision chunks), the
image can carry its wrapper's other fields here, and the hasher rebuilds the wrapper it would
have hashed: the same rule, the same key. Engine-neutral: nothing here imports an engine.

The record lives on the image object only (a copy or an unpickled image has none), and is
written where vLLM hands the image on unchanged, right before it is hashed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from PIL import Image

ATTR = "_vlm_fastpath_encoded_source"


def remember(wrapper: Any) -> bool:
    """Record ``wrapper``'s fields (all but ``media``) on its image; False where ``wrapper``
    is not a dataclass holding a PIL image with its encoded bytes."""
    media = getattr(wrapper, "media", None)
    encoded = getattr(wrapper, "original_bytes", None)
    if not isinstance(media, Image.Image) or not isinstance(encoded, (bytes, bytearray)):
        return False
    if not dataclasses.is_dataclass(wrapper) or isinstance(wrapper, type):
        return False
    fields = {f.name: getattr(wrapper, f.name) for f in dataclasses.fields(wrapper)
              if f.init and f.name != "media"}
    try:
        media.__dict__[ATTR] = (type(wrapper), fields)
    except (AttributeError, TypeError):  # an image type without a __dict__
        return False
    return True


def recorded(obj: Any) -> tuple[type, dict[str, Any]] | None:
    """``(wrapper type, fields)`` recorded on ``obj`` (a PIL image), else None."""
    if not isinstance(obj, Image.Image):
        return None
    entry = getattr(obj, "__dict__", {}).get(ATTR)
    return entry if isinstance(entry, tuple) and len(entry) == 2 else None


def rewrap(image: Image.Image) -> Any | None:
    """The wrapper vLLM would have hashed for ``image``: its type, this image, its fields."""
    entry = recorded(image)
    if entry is None:
        return None
    kind, fields = entry
    return kind(media=image, **fields)


def encoded_size(obj: Any) -> int | None:
    """The byte count of the file ``obj`` was decoded from, if it carries a record."""
    entry = recorded(obj)
    if entry is None:
        return None
    encoded = entry[1].get("original_bytes")
    return len(encoded) if isinstance(encoded, (bytes, bytearray)) else None
