"""Time the Qwen2.5-VL processor vLLM itself builds, with and without vlm-fastpath.

Run inside an engine env from the repository root::

    .envs/vllm-0.33.0/bin/python -m benchmarks.vllm_qwen_processor [--rounds 5] [--workloads ...]

One process: vLLM's multimodal processor (``MULTIMODAL_REGISTRY.create_processor``, no
processor cache) for a local tiny Qwen2.5-VL checkpoint folder (``fixtures/
qwen_checkpoint``, its ``preprocessor_config.json`` set to the Qwen2.5-VL checkpoints' own
min/max_pixels 3136 / 12845056), called through vLLM's whole ``apply`` (HF processor call,
field config, prompt update) with the patches applied and after ``vlm_fastpath.revert()``, in
alternating rounds; medians. Before any timing, both outputs are checked equal (every tensor
``torch.equal``, same prompt tokens). Float32 is vLLM's default; ``uint8`` sets the model
config's ``mm_device_do_normalize`` (vLLM 0.28+), as a GPU deployment would.
Video rows (``v<frames>x<w>x<h>``, issue #29): one decoded clip per prompt, as vLLM's video
loader hands it on (uint8 frames plus metadata, ``do_sample_frames`` off), through the same
``apply``; the plugin's video processor against transformers' ``Qwen2VLVideoProcessor``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
PROMPT_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
QWEN25_PIXELS = {"min_pixels": 3136, "max_pixels": 12845056,
                 "size": {"shortest_edge": 3136, "longest_edge": 12845056}}


def checkpoint(root: Path) -> Path:
    """The tiny Qwen2.5-VL folder with the real checkpoints' pixel limits."""
    from fixtures import qwen_checkpoint

    path = qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN25)
    config_path = path / "preprocessor_config.json"
    config = json.loads(config_path.read_text())
    config.update(QWEN25_PIXELS)
    config_path.write_text(json.dumps(config, indent=2))
    return path


def build(path: Path, uint8: bool) -> tuple[Any, Any]:
    """(vLLM's multimodal processor, its model config) for ``path``."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    config = ModelConfig(model=str(path), tokenizer=str(path), dtype="float32",
                         max_model_len=32768)
    mm = config.multimodal_config
    if hasattr(mm, "mm_device_do_normalize"):
        mm.mm_device_do_normalize = uint8
    elif uint8:
        raise SystemExit("this vLLM has no device-side normalization: no uint8 rows")
    return MULTIMODAL_REGISTRY.create_processor(config), config


def video_item(frames: Any, fps: float = 30.0) -> tuple[Any, dict[str, Any]]:
    """A decoded clip as vLLM's video loader hands it on: frames plus metadata (every frame
    kept, ``do_sample_frames`` off, as for a video vLLM sampled itself)."""
    count = len(frames)
    return frames, {"fps": fps, "duration": count / fps, "total_num_frames": count,
                    "frames_indices": list(range(count)), "video_backend": "opencv",
                    "do_sample_frames": False}


def call(processor: Any, images: list[Any], videos: list[Any] = ()) -> dict[str, Any]:
    """vLLM's ``apply`` on one prompt holding ``images`` then ``videos``: the prompt tokens
    and each tensor."""
    parts = [PROMPT_IMAGE] * len(images) + [PROMPT_VIDEO] * len(videos)
    prompt = "Describe " + " and ".join(parts) + "."
    data: dict[str, Any] = {}
    if images:
        data["image"] = images
    if videos:
        data["video"] = list(videos)
    items = processor.info.parse_mm_data(data)
    out = processor(prompt, items, hf_processor_mm_kwargs={})
    flat: dict[str, Any] = {"prompt_token_ids": list(out["prompt_token_ids"])}
    for modality, entries in out["mm_kwargs"].items():
        for index, item in enumerate(entries):
            for key, field in item.items():
                flat[f"{modality}.{index}.{key}"] = getattr(field, "data", field)
    return flat


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
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


def image_processor_name(processor: Any, attribute: str = "image_processor") -> str:
    image_processor = getattr(processor.info.get_hf_processor(), attribute)
    return f"{type(image_processor).__module__}.{type(image_processor).__name__}"


def bench(processor: Any, images: list[Any], rounds: int,
          videos: list[Any] = ()) -> dict[str, Any]:
    import vlm_fastpath

    attribute = "video_processor" if videos else "image_processor"
    with_out = call(processor, images, videos)  # also the warm-up of each side
    with_cls = image_processor_name(processor, attribute)
    vlm_fastpath.revert("vllm")
    without_out = call(processor, images, videos)
    without_cls = image_processor_name(processor, attribute)
    vlm_fastpath.apply("vllm")
    exact = same(with_out, without_out)
    pixels = [v for k, v in without_out.items()
              if k.endswith(("pixel_values", "pixel_values_videos"))]
    del with_out, without_out
    times: dict[str, list[float]] = {"with": [], "without": []}
    for r in range(rounds):
        for mode in (("with", "without") if r % 2 == 0 else ("without", "with")):
            if mode == "without":
                vlm_fastpath.revert("vllm")
            t0 = time.perf_counter()
            call(processor, images, videos)
            times[mode].append(time.perf_counter() - t0)
            if mode == "without":
                vlm_fastpath.apply("vllm")
    med = {mode: statistics.median(v) * 1000 for mode, v in times.items()}
    return {"with_ms": med["with"], "without_ms": med["without"],
            "speedup": med["without"] / med["with"], "exact": exact,
            "pixel_dtype": str(pixels[0].dtype).replace("torch.", ""),
            "pixel_values_mb": sum(v.numel() * v.element_size() for v in pixels) / 2**20,
            "with_image_processor": with_cls, "without_image_processor": without_cls}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.qwen_preprocess import WORKLOADS, photo_like
    from benchmarks.qwen_video import CLIPS, photo_clip

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--videos", default=",".join(CLIPS),
                        help="clips (frames x width x height), one video per prompt; '' for none")
    parser.add_argument("--dtypes", default="float32,uint8")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import vllm

    import vlm_fastpath

    vlm_fastpath.apply("vllm")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = checkpoint(Path(tmp))
        for dtype in args.dtypes.split(","):
            processor, _ = build(path, uint8=dtype == "uint8")
            for name in filter(None, args.workloads.split(",")):
                count, width, height = WORKLOADS[name]
                images = [photo_like(i + width, width, height) for i in range(count)]
                row = {"workload": name, "dtype": dtype, **bench(processor, images, args.rounds)}
                rows.append(row)
                print(f"done {name} {dtype}", file=sys.stderr, flush=True)
            for name in filter(None, args.videos.split(",")):
                clip = video_item(photo_clip(*CLIPS[name]))
                row = {"workload": f"v{name}", "dtype": dtype,
                       **bench(processor, [], args.rounds, [clip])}
                rows.append(row)
                print(f"done video {name} {dtype}", file=sys.stderr, flush=True)
    print(f"# vLLM {vllm.__version__}: Qwen2.5-VL processor vLLM builds (whole apply), "
          f"medians of {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    head = (f"{'workload':<14} {'pixels':<8} {'with ms':>9} {'without ms':>11} {'x':>6} "
            f"{'out MB':>7} {'exact':>6}")
    print(head)
    print("-" * len(head))
    for row in rows:
        print(f"{row['workload']:<14} {row['pixel_dtype']:<8} {row['with_ms']:9.1f} "
              f"{row['without_ms']:11.1f} {row['speedup']:6.2f} {row['pixel_values_mb']:7.0f} "
              f"{'yes' if row['exact'] else 'NO':>6}")
    by = {(row["workload"], row["dtype"]): row for row in rows}
    for (name, dtype), row in by.items():
        f32 = by.get((name, "float32"))
        if dtype == "uint8" and f32:
            print(f"{name}: uint8/float32 ms with the plugin "
                  f"{row['with_ms'] / f32['with_ms']:.2f}, without "
                  f"{row['without_ms'] / f32['without_ms']:.2f}")
    for kind in ("image", "video"):
        picked = [r for r in rows if r["workload"].startswith("v") == (kind == "video")]
        if picked:
            print(f"{kind} processor with the plugin: {picked[0]['with_image_processor']}; "
                  f"without: {picked[0]['without_image_processor']}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"vllm": vllm.__version__, "rows": rows}, indent=1))
    ok = all(row["exact"] for row in rows)
    if not ok:
        print("NOT EXACT: see the 'exact' column", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
