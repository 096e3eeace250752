"""Reading an engine release's source without importing it: the static scanners' shared part.

ci/sweep/static_vllm.py and ci/sweep/static_sglang.py derive the expected statuses from a
release's code (a wheel, or an installed site-packages dir); both read it through this class.
Stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path


class ReleaseSource:
    """One engine package (``package``) of a wheel or site-packages dir, read as text."""

    package = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None
        self._trees: dict[str, ast.Module | None] = {}

    def text(self, module: str) -> str | None:
        rel = module.replace(".", "/")
        for cand in (f"{rel}.py", f"{rel}/__init__.py"):
            if self._zip is not None:
                try:
                    return self._zip.read(cand).decode("utf-8")
                except KeyError:
                    continue
            elif (self.path / cand).is_file():
                return (self.path / cand).read_text(encoding="utf-8")
        return None

    def exists(self, module: str) -> bool:
        return self.text(module) is not None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            src = self.text(module)
            self._trees[module] = ast.parse(src) if src is not None else None
        return self._trees[module]

    def version(self) -> str:
        """The dist-info's Version (else ``<package>/_version.py``, else the wheel's name)."""
        if self._zip is not None:
            metas = [n for n in self._zip.namelist()
                     if re.fullmatch(rf"{self.package}-[^/]+\.dist-info/METADATA", n)]
            meta = self._zip.read(metas[0]).decode() if metas else ""
        else:
            metas = sorted(self.path.glob(f"{self.package}-*.dist-info/METADATA"))
            meta = metas[0].read_text() if metas else ""
        m = re.search(r"^Version:\s*(\S+)", meta, re.M)
        if m:
            return m.group(1)
        m = re.search(r"^(?:__)?version(?:__)?\s*(?::\s*str)?\s*=\s*[\"']([^\"']+)",
                      self.text(f"{self.package}._version") or "", re.M)
        if m:
            return m.group(1)
        m = re.match(rf"{self.package}-([^-]+)-", self.path.name)
        return m.group(1) if m else "?"

    # top-level and class-level definitions
    def func(self, module: str, name: str, cls: str | None = None) -> ast.FunctionDef | None:
        tree = self.tree(module)
        if tree is None:
            return None
        body = tree.body
        if cls is not None:
            klass = self.klass(module, cls)
            if klass is None:
                return None
            body = klass.body
        found = [node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name == name]
        # typing.overload stubs come first: the implementation is the one without the decorator
        real = [node for node in found if not any(
            ast.unparse(d).rpartition(".")[2] == "overload" for d in node.decorator_list)]
        return (real or found or [None])[0]

    def klass(self, module: str, name: str) -> ast.ClassDef | None:
        tree = self.tree(module)
        for node in tree.body if tree is not None else ():
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        return None

    def source(self, module: str, node: ast.AST | None) -> str:
        if node is None:
            return ""
        return ast.get_source_segment(self.text(module) or "", node) or ""


def version_key(version: str) -> tuple:
    """A sortable key of a final or ``.postN`` release (a ``+local`` suffix is ignored)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?(?:\+\S+)?", version)
    if not m:
        raise ValueError(f"unsupported version {version!r}")
    release = tuple(int(p) for p in m.group(1).split("."))
    release += (0,) * (4 - len(release))
    return release + (int(m.group(2) or -1),)


def in_range(version: str, spec: str) -> bool:
    """PEP 440 ``>=``/``<``/``<=``/``>``/``==`` clauses on final and .postN releases."""
    v = version_key(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, bound = re.fullmatch(r"(>=|<=|==|<|>)\s*(\S+)", clause).groups()
        b = version_key(bound)
        if op == ">" and b[:-1] == v[:-1] and b[-1] == -1:
            return False  # >V excludes V's post-releases (PEP 440)
        ok = {">=": v >= b, "<=": v <= b, "==": v == b, "<": v < b, ">": v > b}[op]
        if not ok:
            return False
    return True


def run_cli(
    engine: str,
    description: str,
    release_cls: type[ReleaseSource],
    facts: Callable[[ReleaseSource], dict],
    statuses: Callable[..., list[tuple[str, str, str]]],
    patch_specs: Callable[[Path], dict],
    default_patches: Path,
    argv: list[str] | None = None,
) -> int:
    """A scanner's command line: the facts and statuses of each release, or ``--csv`` rows."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("inputs", nargs="+", type=Path, help=f"{engine} wheels or site-packages")
    parser.add_argument("--csv", action="store_true", help="expected-status rows only")
    parser.add_argument("--patches", type=Path, default=default_patches)
    args = parser.parse_args(argv)
    specs = patch_specs(args.patches)
    releases = sorted((release_cls(p) for p in args.inputs),
                      key=lambda r: version_key(r.version()))
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if args.csv:
        writer.writerow(("release", "patch", "status", "reason"))
    for r in releases:
        f = facts(r)
        if not args.csv:
            print(f"== {engine} {f['version']} ({r.path})")
            for key, value in f.items():
                if key != "version":
                    print(f"  {key}: {value}")
        for name, status, reason in statuses(r, f, specs):
            if args.csv:
                writer.writerow((f["version"], name, status, reason))
            else:
                print(f"  -> {name}: {status} ({reason})")
    return 0


def read_patch_specs(folder: Path, engine: str) -> dict[str, dict[str, object]]:
    """``name -> {versions, requires_any, ...}`` of every ``engine`` Patch class under ``folder``,
    from its source (never imported).

    Class attributes are constants or module constants; a class without ``versions`` (or
    ``engine``) inherits its base's, looked up among every class of the folder."""
    classes: dict[str, tuple[list[str], dict[str, object]]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts: dict[str, object] = {}
        for n in tree.body:
            if isinstance(n, ast.Assign):
                try:
                    value = ast.literal_eval(n.value)
                except ValueError:
                    continue
                consts.update({t.id: value for t in n.targets if isinstance(t, ast.Name)})
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs: dict[str, object] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                        stmt.targets[0], ast.Name):
                    v = stmt.value
                    if isinstance(v, ast.Name) and v.id in consts:
                        attrs[stmt.targets[0].id] = consts[v.id]
                    else:
                        try:
                            attrs[stmt.targets[0].id] = ast.literal_eval(v)
                        except ValueError:
                            pass
            classes[node.name] = ([ast.unparse(b) for b in node.bases], attrs)

    def resolved(name: str) -> dict[str, object]:
        bases, attrs = classes[name]
        out: dict[str, object] = {}
        for base in bases:
            if base in classes:
                out.update(resolved(base))
        out.update(attrs)
        return out

    out: dict[str, dict[str, object]] = {}
    for name in classes:
        attrs = resolved(name)
        if attrs.get("engine") == engine and "name" in classes[name][1] and "versions" in attrs:
            out[str(attrs["name"])] = attrs
    return out
