"""transformers' ``BatchFeature``, the container engines expect a processor to return.

Looked up once: a failed import is not cached by Python and would search the path on every
call. None where transformers is not installed (the processors then return a plain dict).
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def batch_feature_cls() -> Any:
    """transformers' ``BatchFeature`` class, or None when transformers is not installed."""
    try:
        from transformers import BatchFeature
    except ImportError:
        return None
    return BatchFeature
