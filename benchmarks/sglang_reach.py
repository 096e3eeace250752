"""One request per model family through SGLang's processor worker pool, with and without
vlm-fastpath.

Run in an SGLang env (0.5.17+: the pool) from the repository root::

    .envs/sglang-0.5.23/bin/python -m benchmarks.sglang_reach [--rounds 5] [--archs a,b]

One process, SGLang's CPU path. For each architecture of ``fixtures/vllm_arch_checkpoints``
that SGLang serves with a processor of its own: that processor, built as the server builds it
(SGLang makes its processor worker pool in its ``__init__``: 2 workers on the CPU path), and
one 1280x960 photo-like image per request through the pool (each worker runs on its own
``deepcopy`` of the processor), with the patches applied and after ``revert`` (the processor
built before the revert then answers with transformers' code, as SGLang does without the
plugin; before issue #50 the pool's clones always did). Alternating rounds, medians; outputs
compared first (``torch.equal``), and our processor's calls counted (``served``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

KEYS = ("input_ids", "pixel_values", "image_grid_thw")


def _server_args(path: Path) -> Any:
    """Server args for the CPU path, published the way this release's processors read them."""
    from fixtures.sglang_cpu import server_args_sealed, setup_sglang_cpu

    setup_sglang_cpu()
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    if server_args_sealed():
        args = ServerArgs(model_path=str(path), device="cpu")
    else:
        from sglang.srt.server_args import get_global_server_args

        args = copy.copy(get_global_server_args())
        args.mm_process_config = getattr(args, "mm_process_config", None) or {}
    set_global_server_args_for_scheduler(args)
    return args


def build(name: str, root: Path) -> tuple[Any, Any] | None:
    """(SGLang's processor for the architecture, its fixture entry), or None."""
    from sglang.srt.managers import multimodal_processor as managers
    from transformers import AutoConfig, AutoProcessor

    from fixtures import vllm_arch_checkpoints as archs

    if not managers.PROCESSOR_MAPPING:
        managers.import_processors("sglang.srt.multimodal.processors")
    arch = archs.ARCHS[name]
    try:
        path = archs.ensure(root, name)
        config = AutoConfig.from_pretrained(path, trust_remote_code=arch.trust_remote_code)
        found = [cls for model, cls in managers.PROCESSOR_MAPPING.items()
                 if model.__name__ in (config.architectures or ())]
        if not found:
            return None
        hf = AutoProcessor.from_pretrained(path, trust_remote_code=arch.trust_remote_code)
        return found[0](config, _server_args(path), hf, None), arch
    except Exception as exc:  # noqa: BLE001 - a family this release or its transformers lacks
        print(f"  {name}: not served by this SGLang ({type(exc).__name__})", file=sys.stderr)
        return None


def _request(mm: Any, text: str, image: Any) -> dict[str, Any]:
    out = asyncio.run(mm.mm_processor_executor.run(mm.process_mm_data, input_text=text,
                                                   images=[image]))
    return {k: out[k] for k in KEYS}


def measure(name: str, root: Path, rounds: int) -> dict[str, Any] | None:
    import numpy as np
    import torch
    from PIL import Image

    from fixtures import decode_corpus
    from vlm_fastpath.patches import REGISTRY
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    REGISTRY.apply(engine="sglang")
    built = build(name, root)
    if built is None:
        return None
    mm, arch = built
    if getattr(mm, "mm_processor_executor", None) is None:
        print(f"  {name}: no processor worker pool here", file=sys.stderr)
        return None
    image = Image.fromarray(np.ascontiguousarray(decode_corpus.photo_like(1280, 960, seed=5)))
    text = f"Describe {arch.prompt_image} please."
    calls: list[int] = []
    original = FastQwen2VLImageProcessor.preprocess

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    FastQwen2VLImageProcessor.preprocess = spy  # type: ignore[method-assign]
    try:
        ours = _request(mm, text, image)
    finally:
        FastQwen2VLImageProcessor.preprocess = original  # type: ignore[method-assign]
    REGISTRY.revert(engine="sglang")
    theirs = _request(mm, text, image)
    exact = all(ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k])
                for k in KEYS)
    times: dict[str, list[float]] = {"ours": [], "sglang": []}
    for _ in range(rounds):
        for side in ("ours", "sglang"):
            (REGISTRY.revert if side == "sglang" else REGISTRY.apply)(engine="sglang")
            start = time.perf_counter()
            _request(mm, text, image)
            times[side].append((time.perf_counter() - start) * 1e3)
    mm.mm_processor_executor.shutdown()
    ours_ms, theirs_ms = statistics.median(times["ours"]), statistics.median(times["sglang"])
    return {"architecture": type(mm).__name__ + " / " + name, "served": bool(calls),
            "exact": exact, "ours_ms": ours_ms, "sglang_ms": theirs_ms,
            "ratio": theirs_ms / ours_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--archs", default="qwen2.5-vl,qwen3-vl,qwen3-omni,cosmos3,dots-ocr")
    args = parser.parse_args(argv)
    import sglang

    root = Path(tempfile.mkdtemp(prefix="sglang-reach-"))
    rows = [row for name in args.archs.split(",") if name
            if (row := measure(name, root, args.rounds)) is not None]
    print(f"SGLang {sglang.__version__}, CPU path, one 1280x960 image per request through the "
          "processor worker pool, medians (ms):\n")
    print("| processor / family | served by ours | exact | with | without | ratio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['architecture']} | {'yes' if row['served'] else 'NO'} | "
              f"{'yes' if row['exact'] else 'NO'} | {row['ours_ms']:.1f} | "
              f"{row['sglang_ms']:.1f} | {row['ratio']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
