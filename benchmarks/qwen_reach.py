"""One request per model family our Qwen-VL processors reach, with and without vlm-fastpath.

Run inside a vLLM env from the repository root::

    .envs/vllm-0.34.0/bin/python -m benchmarks.qwen_reach [--rounds 5] [--archs a,b] [--out F]

One process. For each architecture of ``fixtures/vllm_arch_checkpoints`` (tiny local
checkpoints: config, trained tokenizer, processor files) that this vLLM serves: vLLM's own
multimodal processor (``MULTIMODAL_REGISTRY.create_processor``, no processor cache) and one
1280x960 photo-like image through vLLM's whole ``apply`` (vLLM's defaults: uint8 where the
model normalizes on the device), with the patches applied and after ``vlm_fastpath.revert()``,
in alternating rounds; medians. Before any timing the two outputs are compared (every tensor
``torch.equal``, same prompt tokens and placeholders) and our processor's calls are counted:
``served`` says whether ours produced the pixels, ``exact`` whether vLLM's outputs are the same.
Run on an older checkout it gives the "before" column (which families were reached then).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _image() -> Any:
    import numpy as np
    from PIL import Image

    from fixtures import decode_corpus

    return Image.fromarray(np.ascontiguousarray(decode_corpus.photo_like(1280, 960, seed=5)))


def _apply(processor: Any, prompt: str, image: Any) -> dict[str, Any]:
    items = processor.info.parse_mm_data({"image": [image]})
    out = processor(f"Describe {prompt} please.", items, hf_processor_mm_kwargs={})
    flat: dict[str, Any] = {"prompt_token_ids": list(out["prompt_token_ids"])}
    for modality, entries in out["mm_kwargs"].items():
        for index, entry in enumerate(entries):
            for key, field in entry.items():
                flat[f"{modality}.{index}.{key}"] = getattr(field, "data", field)
    flat["placeholders"] = {m: [(p.offset, p.length) for p in v]
                            for m, v in out["mm_placeholders"].items()}
    return flat


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    if a.keys() != b.keys():
        return False
    for key, want in b.items():
        got = a[key]
        if isinstance(want, torch.Tensor):
            if got.dtype != want.dtype or not torch.equal(got, want):
                return False
        elif got != want:
            return False
    return True


def measure(name: str, root: Path, rounds: int) -> dict[str, Any] | None:
    """The row of one architecture (None where this vLLM has no such model)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    import vlm_fastpath
    from fixtures import vllm_arch_checkpoints as archs
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    arch = archs.ARCHS[name]
    path = archs.ensure(root, name)
    try:
        config = ModelConfig(model=str(path), tokenizer=str(path), dtype="float32",
                             max_model_len=32768, trust_remote_code=arch.trust_remote_code)
        processor = MULTIMODAL_REGISTRY.create_processor(config)
    except Exception as exc:  # noqa: BLE001 - a release without this model
        print(f"  {name}: not in this vLLM ({type(exc).__name__})", file=sys.stderr)
        return None
    image = _image()
    calls: list[int] = []
    original = FastQwen2VLImageProcessor.preprocess

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    FastQwen2VLImageProcessor.preprocess = spy  # type: ignore[method-assign]
    try:
        ours = _apply(processor, arch.prompt_image, image)
    finally:
        FastQwen2VLImageProcessor.preprocess = original  # type: ignore[method-assign]
    served = bool(calls)
    vlm_fastpath.revert("vllm")
    theirs = _apply(processor, arch.prompt_image, image)
    vlm_fastpath.apply("vllm")
    times: dict[str, list[float]] = {"ours": [], "vllm": []}
    for _ in range(rounds):
        for side in ("ours", "vllm"):
            if side == "vllm":
                vlm_fastpath.revert("vllm")
            start = time.perf_counter()
            _apply(processor, arch.prompt_image, image)
            times[side].append((time.perf_counter() - start) * 1e3)
            if side == "vllm":
                vlm_fastpath.apply("vllm")
    ours_ms, theirs_ms = statistics.median(times["ours"]), statistics.median(times["vllm"])
    dtype = next((str(v.dtype).replace("torch.", "") for k, v in theirs.items()
                  if k.endswith("pixel_values")), "-")
    return {"name": name, "architecture": arch.architecture, "served": served,
            "exact": _equal(ours, theirs), "dtype": dtype, "ours_ms": ours_ms,
            "vllm_ms": theirs_ms, "ratio": theirs_ms / ours_ms}


def table(rows: list[dict[str, Any]], version: str) -> str:
    lines = [f"vLLM {version}, one 1280x960 image per request, medians (ms):", "",
             "| architecture | served by ours | exact | pixels | with | without | ratio |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['architecture']} | {'yes' if row['served'] else 'NO'} | "
            f"{'yes' if row['exact'] else 'NO'} | {row['dtype']} | {row['ours_ms']:.1f} | "
            f"{row['vllm_ms']:.1f} | {row['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--archs", default="", help="comma-separated fixture names (all)")
    parser.add_argument("--out", default="", help="also write the table to this file")
    args = parser.parse_args(argv)
    import vllm

    import vlm_fastpath
    from fixtures import vllm_arch_checkpoints as archs

    vlm_fastpath.apply("vllm")
    names = [n for n in (args.archs.split(",") if args.archs else archs.ARCHS) if n]
    root = Path(tempfile.mkdtemp(prefix="qwen-reach-"))
    rows = []
    for name in names:
        row = measure(name, root, args.rounds)
        if row is not None:
            rows.append(row)
            print(f"  {name}: served={row['served']} exact={row['exact']} "
                  f"{row['ours_ms']:.1f} / {row['vllm_ms']:.1f} ms", file=sys.stderr, flush=True)
    text = table(rows, vllm.__version__)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
