"""The patch tree: every folder loads, opens with its header, and declares sound dependencies."""

from __future__ import annotations

import importlib
import re

import pytest

from vlm_fastpath.patches.core.catalog import PATCH_FOLDERS, patch_modules
from vlm_fastpath.patches.core.decisions import topological_order
from vlm_fastpath.patches.core.registry import REGISTRY

HEADER_FIELDS = ("Why:", "How", "Upstream PR:", "Versions:", "Delete when:")
PR = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")


@pytest.mark.parametrize("folder", PATCH_FOLDERS)
def test_folder_loads_and_opens_with_its_header(folder: str) -> None:
    package = importlib.import_module(folder)
    doc = package.__doc__ or ""
    for field in HEADER_FIELDS:
        assert field in doc, f"{folder} header lacks {field!r}"
    modules = patch_modules(folder)
    assert modules, folder
    for name in modules:
        importlib.import_module(name)  # a broken module would only be logged at run time


def test_every_patch_is_registered_from_its_folder() -> None:
    patches = REGISTRY.patches()
    folders = {type(p).__module__.rpartition(".")[0] for p in patches}
    assert folders == set(PATCH_FOLDERS)
    assert len({p.name for p in patches}) == len(patches)


def test_metadata_is_sound() -> None:
    patches = REGISTRY.patches()
    names = {p.name for p in patches}
    for patch in patches:
        assert patch.upstream_pr == "" or PR.match(patch.upstream_pr), patch.name
        for dep in (*patch.after, *patch.requires, *patch.requires_any):
            assert dep in names, f"{patch.name} depends on unknown {dep}"
        assert patch.trigger in patch.modules or patch.modules, patch.name
        assert type(patch).__name__.endswith("Patch"), type(patch).__name__
    order, cyclic = topological_order(patches)
    assert not cyclic
    position = {p.name: i for i, p in enumerate(order)}
    for patch in patches:
        for dep in (*patch.after, *patch.requires, *patch.requires_any):
            assert position[dep] < position[patch.name]


def test_touching_lists_every_patch_of_a_module() -> None:
    kimi = {p.name for p in REGISTRY.touching("sglang.srt.models.kimi_k25")}
    assert kimi == {
        "sglang-moonvit-max-seqlen-once",
        "sglang-moonvit-sdpa-host-cu-seqlens",
        "sglang-kimi-k25-encoder-dp-owner-only",
        "sglang-kimi-k25-deferred-owner",
    }


def _versions_section(folder: str) -> str:
    doc = importlib.import_module(folder).__doc__ or ""
    found = re.search(r"Versions:(.*?)(?:\n[A-Z][\w ]*:|\Z)", doc, re.S)
    assert found, f"{folder} header has no Versions: section"
    return found.group(1)


@pytest.mark.parametrize("folder", PATCH_FOLDERS)
def test_versions_match_the_folder_header(folder: str) -> None:
    """Every clause of each patch's ``versions`` is written in its folder's Versions: section,
    and the header names exactly the upper bounds its patches keep (no stale or missing cap)."""
    from packaging.specifiers import SpecifierSet

    section = _versions_section(folder)
    flat = re.sub(r"\s+", "", section)
    patches = [p for p in REGISTRY.patches() if type(p).__module__.rpartition(".")[0] == folder]
    assert patches, folder
    caps = set()
    for patch in patches:
        for clause in SpecifierSet(patch.versions):
            assert str(clause) in flat, f"{patch.name}: {clause} not in {folder}'s Versions:"
            if clause.operator in ("<", "<="):
                caps.add(clause.version)
    written = set(re.findall(r"<\s*=?\s*(\d+(?:\.\d+)+)", section))
    assert written == caps, f"{folder}: header caps {sorted(written)}, patches {sorted(caps)}"
