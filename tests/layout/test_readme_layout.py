"""The README's Layout section names every module and folder of the package, and nothing that
is gone: a move that forgets the README fails here."""

from __future__ import annotations

import re

import pytest

from .import_graph import ROOT

DOCUMENTED = (
    "vlm_fastpath", "vlm_fastpath/imaging", "vlm_fastpath/kimi_integration",
    "vlm_fastpath/qwen_integration", "vlm_fastpath/bench", "vlm_fastpath/patches",
    "vlm_fastpath/patches/core", "vlm_fastpath/patches/adapters", "vlm_fastpath/patches/vllm",
    "vlm_fastpath/patches/sglang",
)


def _layout_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Layout", 1)[1]
    return section.split("```", 2)[1]


def _entries(folder: str) -> set[str]:
    base = ROOT / folder
    names = set()
    for path in base.iterdir():
        if path.name.startswith((".", "__pycache__")) or path.name == "__init__.py":
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name + "/")
        elif path.suffix in (".py", ".json"):
            names.add(path.name)
    return names


@pytest.mark.parametrize("folder", DOCUMENTED)
def test_every_entry_is_in_the_layout(folder: str) -> None:
    block = _layout_block()
    missing = sorted(
        n for n in _entries(folder) if not re.search(rf"(?<![\w/]){re.escape(n)}", block)
    )
    assert missing == [], f"README Layout lacks {missing} of {folder}/"


def test_the_layout_names_nothing_that_is_gone() -> None:
    block = _layout_block()
    known = set().union(*(_entries(f) for f in DOCUMENTED))
    known |= {"vlm_fastpath/", "__init__.py", "__main__.py", "fixtures/", "tests/", "ci/",
              "benchmarks/",
              "layout/", "engines/"}
    named = set(re.findall(r"(?<![\w/.])([A-Za-z_]\w*(?:\.py|\.json|/))", block))
    assert sorted(named - known) == []
