"""The package's import graph, read from the source (nothing is imported).

Every ``import`` and ``from ... import`` statement counts, at module level or inside a
function (a lazy import is still a dependency); a ``from package import name`` where ``name``
is a submodule counts as an import of that submodule. Edges to a package's own ``__init__``
that Python runs on the way to a submodule are not counted: only the modules named.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "vlm_fastpath"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str = PACKAGE, root: Path = ROOT) -> dict[str, Path]:
    base = root / package.replace(".", "/")
    return {module_name(p, root): p for p in sorted(base.rglob("*.py"))}


def _resolve(current: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = current.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` (and any other dotted names) that ``name`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return found


def graph(package: str = PACKAGE, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package modules it imports."""
    mods = modules(package, root)
    known = set(mods)
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges[name] = {m for m in imports_of(name, path, known) if m in known and m != name}
    return edges


def all_imports(package: str = PACKAGE, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> every dotted name it imports (inside the package or not)."""
    mods = modules(package, root)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
