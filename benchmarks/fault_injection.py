"""Calls 1-5 through vLLM's own Kimi and Qwen2.5-VL processors with a fault in our fast path.

Run inside an engine env from the repository root (issue #31's closing figure)::

    .envs/vllm-0.33.0/bin/python -m benchmarks.fault_injection [--limit 3]

This process (the plugin applied by its ``.pth``) builds the processors the way vLLM does and
holds them, as vLLM caches them: Kimi K2.5 through ``KimiK25ProcessingInfo`` and the release's
own call of its HF processor (``_call_hf_processor`` / ``_apply_hf_processor_main``), Qwen2.5-VL
through ``MULTIMODAL_REGISTRY.create_processor`` and its whole ``apply``. Then
``FusedKimiProcessor.preprocess`` and ``FastQwen2VLImageProcessor.preprocess`` are made to
raise, and ``limit + 2`` calls run through the held processors; for the last one the fault is
taken out again (a fast path that works, which must no longer be consulted). Each call's
answer is compared (``torch.equal``, same prompt tokens) with a child process run with
``VLM_FASTPATH=0`` on the same inputs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

KIMI_PATCH = "vllm-kimi-fused-processor"
QWEN_PATCH = "vllm-qwen-vl-image-processor"


def _inputs() -> tuple[list[dict[str, Any]], list[Any]]:
    from fixtures.vllm_requests import kimi_medias as _medias
    from fixtures.vllm_requests import qwen_images as _images

    return _medias()[:3], _images()[:3]


def _models(root: Path) -> tuple[Path, Path]:
    from fixtures import qwen_checkpoint
    from fixtures.vllm_kimi_model import make_model_dir

    return make_model_dir(root), qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN25)


def _processors(kimi_dir: Path, qwen_dir: Path) -> tuple[Any, Any]:
    """vLLM's Kimi multimodal processor and Qwen2.5-VL processor, built as vLLM builds them."""
    import torch
    from vllm.config import ModelConfig
    from vllm.model_executor.models import kimi_k25
    from vllm.multimodal import MULTIMODAL_REGISTRY

    from fixtures.vllm_requests import kimi_mm_processor as _mm_processor

    kimi = _mm_processor(kimi_k25, kimi_dir, torch.float32)
    config = ModelConfig(model=str(qwen_dir), tokenizer=str(qwen_dir), dtype="float32",
                         max_model_len=8192)
    return kimi, MULTIMODAL_REGISTRY.create_processor(config)


def _kimi_call(processor: Any, medias: list[dict[str, Any]]) -> dict[str, Any]:
    from fixtures.vllm_requests import hf_inputs as _hf_inputs

    out = _hf_inputs(processor, medias)
    return {key: out[key] for key in ("pixel_values", "grid_thws")}


def _qwen_call(processor: Any, images: list[Any]) -> dict[str, Any]:
    from benchmarks.vllm_qwen_processor import call

    return call(processor, images)


def _equal(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    import torch

    if ours.keys() != theirs.keys():
        return False
    for key, want in theirs.items():
        got = ours[key]
        if isinstance(want, torch.Tensor):
            if not (got.dtype == want.dtype and torch.equal(got, want)):
                return False
        elif got != want:
            return False
    return True


def reference(root: Path, out: Path) -> None:
    """Child with ``VLM_FASTPATH=0``: the engine's own answers, saved for the parent."""
    import torch

    import vlm_fastpath

    applied = [r["name"] for r in vlm_fastpath.status() if r["status"] == "applied"]
    assert not applied, f"VLM_FASTPATH=0 yet applied: {applied}"
    kimi, qwen = _processors(*_models(root))
    medias, images = _inputs()
    torch.save({"kimi": _kimi_call(kimi, medias), "qwen": _qwen_call(qwen, images)}, out)


def _status(name: str) -> str:
    import vlm_fastpath

    return next(r["status"] for r in vlm_fastpath.status("vllm") if r["name"] == name)


def _fast_paths() -> dict[str, Any]:
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    return {"kimi": FusedKimiProcessor, "qwen": FastQwen2VLImageProcessor}


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("injected fault in the fast path")


def run(limit: int) -> list[str]:
    import torch

    os.environ["VLM_FASTPATH_FAULT_LIMIT"] = str(limit)
    root = Path(tempfile.mkdtemp(prefix="vlm-fastpath-faults-"))
    saved = root / "reference.pt"
    env = dict(os.environ, VLM_FASTPATH="0")
    subprocess.run([sys.executable, "-m", "benchmarks.fault_injection", "--reference",
                    str(root), str(saved)], check=True, env=env)
    theirs = torch.load(saved)
    kimi, qwen = _processors(*_models(root))
    medias, images = _inputs()
    calls = {"kimi": lambda: _kimi_call(kimi, medias), "qwen": lambda: _qwen_call(qwen, images)}
    patches = {"kimi": KIMI_PATCH, "qwen": QWEN_PATCH}
    held = type(kimi.info.image_processor).__name__
    lines = [f"vLLM {_vllm_version()}, VLM_FASTPATH_FAULT_LIMIT={limit}; Kimi processor "
             f"vLLM holds: {held}"]
    for family, cls in _fast_paths().items():
        original = cls.__dict__["preprocess"]
        consulted: list[int] = []
        cls.preprocess = _boom
        try:
            for n in range(1, limit + 3):
                fixed = n == limit + 2
                if fixed:
                    cls.preprocess = _spy(original, consulted, n)
                lines.append(_one_call(family, n, calls[family], theirs[family],
                                       patches[family], consulted, fixed))
        finally:
            cls.preprocess = original
    return lines


def _spy(original: Any, consulted: list[int], n: int) -> Any:
    """Our working fast path, noting that call ``n`` ran it."""

    def preprocess(*args: Any, **kwargs: Any) -> Any:
        consulted.append(n)
        return original(*args, **kwargs)

    return preprocess


def _one_call(family: str, n: int, call: Any, want: dict[str, Any], patch: str,
              consulted: list[int], fixed: bool) -> str:
    fault = "fast path fixed" if fixed else "fault injected"
    try:
        got = call()
        outcome = "answered"
        same = "yes" if _equal(got, want) else "NO"
    except Exception as exc:  # noqa: BLE001 - the figure reports it
        outcome = f"raised {type(exc).__name__}: {str(exc)[:80]}"
        same = "no"
    ran = " (our fast path ran)" if n in consulted else ""
    return (f"{family:4s} call {n} ({fault}): {outcome}{ran}; patch {patch}: {_status(patch)}; "
            f"equal to VLM_FASTPATH=0: {same}")


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=3)
    parser.add_argument("--reference", nargs=2, metavar=("ROOT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(Path(args.reference[0]), Path(args.reference[1]))
        return
    for line in run(args.limit):
        print(line)


if __name__ == "__main__":
    main()
