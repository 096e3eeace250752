"""The release sweep's data: tables complete, every release accounted for, page current.

The sweep itself (ci/sweep/run.py) needs the engine envs; this checks, in the core suite, what
can go stale without them: a patch added without table rows or behaviour tests, a release
without a pin file or a recorded reason, a COVERAGE.md that no longer matches the tables.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vlm_fastpath.patches.core.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    """A ci/sweep module by path (ci/ is no package, and must not shadow installed names)."""
    spec = importlib.util.spec_from_file_location(f"_sweep_{name}", ROOT / f"ci/sweep/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


behaviour = _load("behaviour")
coverage = _load("coverage_page")

# The ranges the patches declare, minor by minor: the sweep must have a row for each.
MINORS = {
    "vllm": [f"0.{m}" for m in range(15, 35)],
    "sglang": [f"0.5.{p}" for p in range(12, 24)],
}


def _minor(engine: str, release: str) -> str:
    v = Version(release)
    return f"{v.major}.{v.minor}" if engine == "vllm" else f"{v.major}.{v.minor}.{v.micro}"


@pytest.mark.parametrize("engine", coverage.ENGINES)
def test_every_release_has_a_row_for_every_patch(engine: str) -> None:
    table = coverage.load(engine)
    patches = {p.name for p in REGISTRY.patches(engine)}
    for release, rows in table.items():
        assert set(rows) == patches, (release, set(rows) ^ patches)
        for name, (_status, reason) in rows.items():
            assert reason.strip(), f"{engine} {release} {name}: no reason"
    assert sorted({_minor(engine, r) for r in table}, key=Version) == MINORS[engine]


@pytest.mark.parametrize("engine", coverage.ENGINES)
def test_out_of_range_rows_never_claim_applied(engine: str) -> None:
    for release, rows in coverage.load(engine).items():
        for name, (status, _reason) in rows.items():
            patch = REGISTRY.get(name)
            in_range = Version(Version(release).base_version) in SpecifierSet(patch.versions)
            if not in_range:
                assert status != "applied", (engine, release, name, patch.versions)


@pytest.mark.parametrize("engine", coverage.ENGINES)
def test_every_release_is_installed_or_recorded(engine: str) -> None:
    skipped = coverage.not_installable()
    folder = "engines" if engine == "vllm" else "sglang"
    for release in coverage.load(engine):
        pin = ROOT / f"ci/{folder}/{engine}-{release}.txt"
        recorded = skipped.get((engine, release))
        assert pin.exists() or recorded, f"{engine} {release}: no pin file, no recorded reason"
        if recorded:
            assert recorded["error"] and recorded["justification"], recorded


def test_every_patch_names_behaviour_tests_that_exist() -> None:
    for patch in REGISTRY.patches():
        nodes = behaviour.BEHAVIOUR.get(patch.name)
        assert nodes, f"{patch.name}: no behaviour tests for the sweep"
        for node in nodes:
            file, _, func = node.partition("::")
            path = ROOT / "tests/engines" / patch.engine / file
            assert path.exists(), node
            if func:
                names = {n.name for n in ast.walk(ast.parse(path.read_text()))
                         if isinstance(n, ast.FunctionDef)}
                assert func.partition("[")[0] in names, node  # a parametrized case too
    assert set(behaviour.BEHAVIOUR) <= {p.name for p in REGISTRY.patches()}
    named = {node for nodes in behaviour.BEHAVIOUR.values() for node in nodes}
    for (engine, release), gaps in behaviour.KNOWN_GAPS.items():
        assert release in coverage.load(engine), (engine, release)
        for node, why in gaps.items():
            assert node in named and why, (engine, release, node)


def test_coverage_page_is_current() -> None:
    assert coverage.PAGE.read_text() == coverage.render(), (
        "ci/COVERAGE.md is stale: run python3.11 ci/sweep/coverage_page.py")
