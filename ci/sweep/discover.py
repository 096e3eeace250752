"""Engine releases on the registry that the sweep has not recorded yet, and a recipe for each.

Why: a hand-kept list of releases is stale the day an engine ships one. The sweep reads the
registry's list at run time (through pip, with the index pip is configured for), so a new release
is run -- under the patches' contract, without expected statuses -- the day it appears, and is
printed as NEW until someone records it (ci/README.md, "Add a version").

Recorded means: rows in ci/sweep/expected/<engine>.csv, a row of ci/sweep/vllm-patch-releases.md
(a vLLM patch release judged file by file against its minor's tested release), or a line of
ci/sweep/not-installable.csv. ``SWEEP_HIDE`` / ``--hide`` treat recorded releases as new (to show
what the sweep does with one).

A new release's env recipe is written from its wheel's metadata into the machine's cache, never
into the checkout (``pins_for``). Stdlib plus ``packaging`` (or pip's vendored copy of it).
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a bare python3.11 still has pip, and pip carries its own copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXPECTED = HERE / "expected"
PATCH_RELEASES = HERE / "vllm-patch-releases.md"
NOT_INSTALLABLE = HERE / "not-installable.csv"
PIN_DIRS = {"vllm": ROOT / "ci/engines", "sglang": ROOT / "ci/sglang"}
BASE_PINS = ROOT / "ci/engines/base-requirements.txt"
# The oldest release of each engine the patches were ever written for (issue #27).
FLOORS = {"vllm": "0.15", "sglang": "0.5.12"}
# Final releases and their .postN; no pre-, dev- or local versions.
FINAL = re.compile(r"\d+(?:\.\d+)*(?:\.post\d+)?")
# The base's torch stack stays: its CUDA builds come from this machine's local index and run on a
# CPU (an engine's exact torch pin would pull PyPI builds that do not), as for every pinned env.
KEEP_BASE = {"torch", "torchvision", "torchaudio"}
# Whose newest allowed release a new env gets even where the base's fits: the image processors
# the engines hand out are transformers', so the env has what a fresh `pip install` gets.
FRESHEST = {"transformers"}
PIP_TIMEOUT = 120


def release_key(version: str) -> Version:
    return Version(version)


def parse_index_versions(text: str) -> list[str]:
    """The versions of ``pip index versions`` output (its ``Available versions:`` line)."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def in_scope(engine: str, version: str) -> bool:
    """A final (or .postN) release at or above the engine's floor."""
    return bool(FINAL.fullmatch(version)) and Version(version) >= Version(FLOORS[engine])


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=PIP_TIMEOUT)


def available(package: str, pip: Callable[..., subprocess.CompletedProcess] = _pip
              ) -> tuple[list[str] | None, str]:
    """(the registry's versions of ``package``, newest first; or None and why not)."""
    try:
        proc = pip("index", "versions", package)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    versions = parse_index_versions(proc.stdout)
    if proc.returncode or not versions:
        err = [ln for ln in proc.stderr.splitlines() if not ln.startswith("WARNING")]
        return None, (err[-1] if err else f"pip index versions {package}: rc {proc.returncode}")
    return versions, ""


def registry_releases(engine: str, pip: Callable[..., subprocess.CompletedProcess] = _pip
                      ) -> tuple[list[str] | None, str]:
    """The engine's in-scope releases on the registry, oldest first (None when unreachable)."""
    versions, why = available(engine, pip)
    if versions is None:
        return None, why
    return sorted((v for v in versions if in_scope(engine, v)), key=release_key), ""


def hidden(extra: Iterable[str] = ()) -> set[str]:
    """Releases to treat as unrecorded: ``SWEEP_HIDE`` (comma-separated) and ``--hide``."""
    names = {v.strip() for v in os.environ.get("SWEEP_HIDE", "").split(",")}
    return {v for v in names | set(extra) if v}


def patch_release_rows(text: str | None = None) -> dict[str, str]:
    """``skipped -> tested`` from the table of ci/sweep/vllm-patch-releases.md."""
    text = PATCH_RELEASES.read_text() if text is None else text
    rows = {}
    for m in re.finditer(r"^\|\s*(\d[\w.]*)\s*\|\s*(\d[\w.]*)\s*\|", text, re.M):
        rows[m.group(1)] = m.group(2)
    return rows


def table_releases(engine: str) -> set[str]:
    with open(EXPECTED / f"{engine}.csv", newline="") as handle:
        return {row["release"] for row in csv.DictReader(handle)}


def not_installable(engine: str) -> set[str]:
    if not NOT_INSTALLABLE.exists():
        return set()
    with open(NOT_INSTALLABLE, newline="") as handle:
        return {r["release"] for r in csv.DictReader(handle) if r["engine"] == engine}


def recorded(engine: str) -> dict[str, str]:
    """``release -> how it is recorded`` (table, patch release of X, not installable)."""
    out = {r: "table" for r in table_releases(engine)}
    if engine == "vllm":
        for skipped, tested in patch_release_rows().items():
            out.setdefault(skipped, f"patch release of {tested}")
    for release in not_installable(engine):
        out.setdefault(release, "not installable")
    return out


def unrecorded(engine: str, registry: Iterable[str], hide: set[str]) -> list[str]:
    """Registry releases without a record, plus the hidden ones, oldest first."""
    known = recorded(engine)
    found = {v for v in registry if v not in known} | {v for v in hide if v in known}
    return sorted(found, key=release_key)


def tested_release_of_minor(release: str, tested: Iterable[str]) -> str | None:
    """The newest tested release of ``release``'s minor (another release than itself)."""
    v = Version(release)
    same = [t for t in tested if t != release and Version(t).release[:2] == v.release[:2]]
    return max(same, key=release_key) if same else None


# -- a new release's env recipe --------------------------------------------------------------
def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return zf.read(names[0]).decode()


def requirements(metadata: str) -> dict[str, Requirement]:
    """The wheel's requirements that hold on this machine (no extras), by canonical name."""
    env = {**default_environment(), "extra": ""}
    out: dict[str, Requirement] = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        out[canonicalize_name(req.name)] = req
    return out


def parse_pins(lines: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``name==version`` lines of a pin file: canonical name -> (name as written, version)."""
    out = {}
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line)
        if m:
            out[canonicalize_name(m.group(1))] = (m.group(1), m.group(2))
    return out


def _exact(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


def newest_allowed(name: str, req: Requirement,
                   versions: Callable[[str], list[str] | None]) -> str | None:
    """The newest final release of ``name`` on the registry that ``req`` allows."""
    found = [v for v in versions(name) or () if FINAL.fullmatch(v) and v in req.specifier]
    return max(found, key=release_key) if found else None


def pins_for(engine: str, release: str, metadata: str, template: list[str], base: list[str],
             versions: Callable[[str], list[str] | None], common: Iterable[str] = ()
             ) -> tuple[list[str], list[str]]:
    """(pin lines, notes) for a new release, from its wheel's metadata.

    The newest recorded pin file is the template: its packages the wheel requires are kept,
    re-pinned to the wheel's exact pin, else kept where they fit, else the newest that fits
    (packages it does not require -- test extras -- drop out). ``common`` pins (what every env
    of the engine needs beyond the base, e.g. ci/sglang/common.txt, often indirect
    requirements) are all kept, re-pinned the same way where the wheel names them. A base
    package older than the wheel allows gets the newest that fits; a newer one stays (an older
    release over ``--no-deps`` lacks its own older requirements: SGLang 0.5.23's openai==2.8.0
    needs httpx, the base's openai 3.57 does not), as does the torch stack (``KEEP_BASE``);
    ``FRESHEST`` packages get what a fresh install gets. Requirements in neither are GPU-only
    or unused on this path: the wheel goes in ``--no-deps`` and the notes name them.
    """
    reqs = requirements(metadata)
    lines = [f"{engine}=={release}"]
    notes: list[str] = []
    done = {canonicalize_name(engine)}

    def pick(key: str, current: str | None) -> str | None:
        req = reqs[key]
        exact = _exact(req)
        if exact:
            return exact
        if key not in FRESHEST and current is not None and current in req.specifier:
            return current
        return newest_allowed(req.name, req, versions)

    shared = parse_pins(common)
    for key, (name, version) in {**parse_pins(template), **shared}.items():
        if key in done or (key not in reqs and key not in shared):
            continue
        chosen = pick(key, version) if key in reqs else version
        if chosen is None:
            notes.append(f"{name}: nothing on the registry fits {reqs[key].specifier}")
            continue
        lines.append(f"{name}=={chosen}")
        done.add(key)
    base_pins = parse_pins(base)
    for key, (name, version) in base_pins.items():
        if key in done or key not in reqs or key in KEEP_BASE:
            continue
        if version in reqs[key].specifier and key not in FRESHEST:
            continue
        chosen = pick(key, version)
        if chosen is None:
            notes.append(f"{name}: nothing on the registry fits {reqs[key].specifier}")
        elif key not in FRESHEST and Version(chosen) < Version(version):
            notes.append(f"{name}: the base's {version} kept over {reqs[key].specifier} (an "
                         "older one, installed --no-deps, would miss its own requirements)")
        elif chosen != version:
            lines.append(f"{name}=={chosen}")
            notes.append(f"{name} {chosen} over the base's {version} ({reqs[key].specifier})")
        done.add(key)
    skipped = sorted(str(reqs[k]) for k in reqs if k not in done and k not in base_pins)
    if skipped:
        notes.append("not installed (the wheel goes in --no-deps; in neither the base nor the "
                     f"last recipe): {', '.join(skipped)}")
    return lines, notes


def template_for(engine: str, release: str) -> tuple[list[str], list[str]]:
    """(the pin lines of the newest recorded release below ``release``, the engine's common
    pins: ci/sglang/common.txt, none for vLLM)."""
    folder = PIN_DIRS[engine]
    common = folder / "common.txt"
    shared = common.read_text().splitlines() if engine == "sglang" and common.exists() else []
    older = [p for p in folder.glob(f"{engine}-*.txt")
             if FINAL.fullmatch(p.stem[len(engine) + 1:])
             and release_key(p.stem[len(engine) + 1:]) < release_key(release)]
    if not older:
        return [], shared
    newest = max(older, key=lambda p: release_key(p.stem[len(engine) + 1:]))
    return newest.read_text().splitlines(), shared


def write_pins(engine: str, release: str, wheel: Path, target: Path,
               versions: Callable[[str], list[str] | None]) -> Path:
    """Write the generated recipe of a new release to ``target`` (in the cache)."""
    template, common = template_for(engine, release)
    lines, notes = pins_for(engine, release, wheel_metadata(wheel), template,
                            BASE_PINS.read_text().splitlines(), versions, common)
    header = [f"# {engine} {release}: generated by ci/sweep/discover.py from {wheel.name}'s "
              "metadata", "# (a release the sweep has not recorded; not part of the checkout)"]
    header += [f"# {n}" for n in notes]
    target.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(header + lines) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return target


def download_wheel(engine: str, release: str, folder: Path) -> Path:
    """The release's wheel, fetched once into ``folder`` (pip download --no-deps)."""
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"{engine.replace('-', '_')}-{release}-*.whl"
    found = sorted(folder.glob(pattern))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               f"{engine}=={release}", "-d", str(folder)],
                              capture_output=True, text=True, timeout=1800)
        found = sorted(folder.glob(pattern))
        if proc.returncode or not found:
            err = [ln for ln in proc.stderr.splitlines() if not ln.startswith("WARNING")]
            raise RuntimeError(f"pip download {engine}=={release}: "
                               f"{err[-1] if err else proc.returncode}")
    return found[0]
