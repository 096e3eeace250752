"""Time the Kimi K2.5 processor vLLM itself hands out, with and without vlm-fastpath.

Run inside an engine env from the repository root::

    .envs/vllm-0.33.0/bin/python -m benchmarks.vllm_processor

Both measurements run in one process: the processor is obtained through vLLM's real
``KimiK25ProcessingInfo.__init__`` (local model folder, see fixtures/vllm_kimi_model.py)
with the patches applied, then again after ``vlm_fastpath.revert()``. Before vLLM 0.25 the
"without" processor is the test folder's stand-in for the checkpoint's remote code (plain
numpy from the spec), not the real checkpoint file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _images(count: int, size: int, seed: int = 0) -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
        for _ in range(count)
    ]


def _time_processor(model_dir: Path, images: list[Any], repeats: int) -> tuple[str, list[float]]:
    from fixtures.vllm_kimi_model import clear_processor_caches, processing_info

    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    medias = [{"type": "image", "image": image} for image in images]
    processor.preprocess([dict(m) for m in medias], return_tensors="pt")  # warm-up / JIT
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        processor.preprocess([dict(m) for m in medias], return_tensors="pt")
        times.append((time.perf_counter() - start) * 1000.0)
    return type(processor).__name__, times


def run(images: int = 8, size: int = 2048, repeats: int = 3) -> dict[str, Any]:
    """Median ms of vLLM's processor with the plugin vs without; prints and returns them."""
    import vllm
    import vllm.model_executor.models.kimi_k25  # noqa: F401 - the import applies the patches

    import vlm_fastpath
    from fixtures.vllm_kimi_model import make_model_dir

    with tempfile.TemporaryDirectory(prefix="vllm-processor-bench-") as tmp:
        os.environ.setdefault("HF_MODULES_CACHE", str(Path(tmp) / "modules"))
        model_dir = make_model_dir(Path(tmp))
        pixels = _images(images, size)
        vlm_fastpath.apply("vllm")
        with_name, with_times = _time_processor(model_dir, pixels, repeats)
        vlm_fastpath.revert("vllm")
        without_name, without_times = _time_processor(model_dir, pixels, repeats)
        vlm_fastpath.apply("vllm")
    result = {
        "vllm": vllm.__version__,
        "images": f"{images}x{size}x{size}",
        "cpus": len(os.sched_getaffinity(0)),
        "with_plugin": {"processor": with_name, "median_ms": statistics.median(with_times)},
        "without_plugin": {
            "processor": without_name,
            "median_ms": statistics.median(without_times),
        },
    }
    result["speedup"] = result["without_plugin"]["median_ms"] / result["with_plugin"]["median_ms"]
    print(
        f"vllm {result['vllm']}, {result['images']} images, {result['cpus']} CPUs, "
        f"median of {repeats}:\n"
        f"  with vlm-fastpath    ({with_name}): {result['with_plugin']['median_ms']:.0f} ms\n"
        f"  without (vLLM's own) ({without_name}): "
        f"{result['without_plugin']['median_ms']:.0f} ms\n"
        f"  ratio without/with: {result['speedup']:.2f}x"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run(args.images, args.size, args.repeats)


if __name__ == "__main__":
    main()
