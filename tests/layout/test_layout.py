"""The layout's rules, checked on the source: each concept has one home, nothing cycles.

- ``imaging`` is model-neutral: it imports neither model's folder nor the patches.
- ``kimi_integration`` and ``qwen_integration`` never import each other; the model side
  imports no engine.
- No SGLang patch imports a vLLM patch's module, or the reverse (what both hand out lives in
  ``patches.adapters``).
- There is no import cycle in the package, lazy imports included.
- ``benchmarks/`` does not import ``tests/``.
"""

from __future__ import annotations

import pytest

from .import_graph import ROOT, all_imports, cycles, graph, module_name

GRAPH = graph()
IMPORTS = all_imports()


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _offenders(source: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{mod} imports {dep}"
        for mod, deps in IMPORTS.items() if _under(mod, source)
        for dep in deps if any(_under(dep, f) for f in forbidden)
    )


KIMI = "vlm_fastpath.kimi_integration"
QWEN = "vlm_fastpath.qwen_integration"
IMAGING = "vlm_fastpath.imaging"
PATCHES = "vlm_fastpath.patches"


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        (QWEN, (KIMI,)),
        (KIMI, (QWEN,)),
        (IMAGING, (KIMI, QWEN, PATCHES)),
        (f"{PATCHES}.sglang", (f"{PATCHES}.vllm",)),
        (f"{PATCHES}.vllm", (f"{PATCHES}.sglang",)),
        (f"{PATCHES}.core", (f"{PATCHES}.vllm", f"{PATCHES}.sglang", f"{PATCHES}.adapters")),
        (f"{PATCHES}.adapters", (f"{PATCHES}.vllm", f"{PATCHES}.sglang")),
        (KIMI, ("vllm", "sglang", PATCHES)),
        (QWEN, ("vllm", "sglang", PATCHES)),
        (IMAGING, ("vllm", "sglang")),
    ],
)
def test_no_forbidden_imports(source: str, forbidden: tuple[str, ...]) -> None:
    assert _offenders(source, forbidden) == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def test_the_graph_sees_imports() -> None:
    # A reader that found nothing would pass every rule above.
    assert f"{IMAGING}.resample" in GRAPH[f"{KIMI}.processor"]
    assert f"{QWEN}.hf_config" in GRAPH[f"{QWEN}.processor"]
    assert f"{PATCHES}.adapters.hand_out" in IMPORTS[
        f"{PATCHES}.sglang.qwen_vl_processor.multimodal_processors_base_processor"]


def test_benchmarks_do_not_import_tests() -> None:
    offenders = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        name = module_name(path)
        from .import_graph import imports_of

        deps = imports_of(name, path, set())
        offenders += [f"{name} imports {d}" for d in deps if _under(d, "tests")]
    assert offenders == []
