"""Fingerprints of the engine code a patch relies on, and the ones the release sweep verified.

A patch that is not a backport has no upper version bound: it applies where its contract holds
on the installed code. One cheap clause of that contract is "the code we replace is code the
sweep has seen": ``code_fingerprint`` hashes the source files of a patch's upstream modules
(without importing them), and ``verified.json`` (written by ``ci/sweep/run.py`` after a full
pass, shipped in the wheel) maps each patch to the fingerprint of every release where the sweep
saw it applied and verified. The sweep computes its fingerprints with the same function.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable
from pathlib import Path

VERIFIED_FILE = Path(__file__).with_name("verified.json")


def fingerprint_files(files: Iterable[tuple[str, bytes | None]]) -> str:
    """sha256 (16 hex) over ``(module name, source bytes or None when absent)`` pairs."""
    digest = hashlib.sha256()
    for name, data in sorted(files, key=lambda pair: pair[0]):
        digest.update(name.encode() + b"\0" + (data if data is not None else b"absent"))
    return digest.hexdigest()[:16]


def _module_source(name: str) -> bytes | None:
    """The bytes of ``name``'s source file, found without importing it (None when absent)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return Path(origin).read_bytes()
    except OSError:
        return None


def code_fingerprint(
    modules: Iterable[str], read: Callable[[str], bytes | None] = _module_source
) -> str:
    """Fingerprint of the installed source of ``modules`` (the sweep's ``modules_hash``)."""
    return fingerprint_files((name, read(name)) for name in modules)


@functools.cache
def verified() -> dict[str, dict[str, dict[str, str]]]:
    """``{engine: {patch: {release: fingerprint}}}`` as the sweep last recorded it."""
    try:
        data = json.loads(VERIFIED_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def verified_releases(engine: str, patch: str) -> dict[str, str]:
    """``{release: fingerprint}`` of the releases where the sweep verified ``patch``."""
    return dict(verified().get(engine, {}).get(patch, {}))
