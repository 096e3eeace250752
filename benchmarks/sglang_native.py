"""Bytes to Qwen2.5-VL pixel_values: SGLang 0.5.23's native pipeline against vlm-fastpath.

Run in the SGLang 0.5.23 env from the repository root::

    .envs/sglang-0.5.23/bin/python -m benchmarks.sglang_native [--repeats 7] [--quick]

Sides, on the same encoded bytes, in one process, calls alternated, medians:

- SGLang native: ``qwen_vl.preprocess(bytes, spec_json)`` of its Rust extension
  (``sglang.srt.rust_extensions._multimodal``: decode, smart_resize, resize, normalize,
  patchify), with the spec SGLang builds for Qwen2.5-VL's torchvision processor
  (``RustMmSpec``, resample ``aten_u8``).
- vlm-fastpath: SGLang's own ``load_image`` on the bytes with ``sglang-fast-image-decode``
  applied (Pillow opens, the verified codec library decodes, the decoder's array handed on),
  then ``FastQwen2VLImageProcessor`` mirrored from transformers' ``Qwen2VLImageProcessor``,
  offered to the decode layer as SGLang's Qwen patch offers it (from 2 MP a JPEG or PNG is
  patchified while it decodes).

Exactness, every row, both sides: ``torch.equal`` against transformers' ``Qwen2VLImageProcessor``
(torchvision) on the image Pillow loads from the same bytes. Target (issue #30): ours faster on
every row, and exact on every row (theirs is not on JPEG: its decoder differs from Pillow's).

A third side, ours compact: the same call inside ``compact.emitting()``, as SGLang's tokenizer
process runs it where ``sglang-qwen-compact-image-rows`` applies (each patch once; its
expansion checked ``torch.equal`` to transformers'), and the pickled ``pixel_values`` each side
hands to the scheduler (MiB).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = ((1024, 1024), (2048, 2048), (4032, 3024))
FORMATS = (("jpeg", "JPEG", {"quality": 90}), ("png", "PNG", {}), ("webp", "WEBP",
                                                                     {"quality": 80}))


def native_preprocess() -> Callable[[bytes], Any]:
    """bytes -> ``[N, 1176]`` float32 pixel_values by SGLang's native Qwen-VL pipeline."""
    import torch
    from sglang.srt.rust_extensions import load_rust_extension
    from sglang.srt.rust_server.multimodal import RustMmSpec

    from vlm_fastpath.bench.checkpoints import QWEN25_VL_CFG as CFG

    native = load_rust_extension("sglang.srt.rust_extensions._multimodal", mode="never")
    spec = RustMmSpec(
        family="qwen_vl", feature_shm=False, image_token_id=151655,
        patch_size=CFG["patch_size"], merge_size=CFG["merge_size"],
        temporal_patch_size=CFG["temporal_patch_size"], min_pixels=CFG["min_pixels"],
        max_pixels=CFG["max_pixels"], image_mean=tuple(CFG["image_mean"]),
        image_std=tuple(CFG["image_std"]), resample="aten_u8",
        vision_start_token_id=None, vision_end_token_id=None, video_token_id=None,
    ).rust_json()
    dim = 3 * CFG["temporal_patch_size"] * CFG["patch_size"] ** 2

    def run(data: bytes) -> Any:
        flat, _grid = native.qwen_vl.preprocess(data, spec)
        return torch.as_tensor(flat).reshape(-1, dim)

    return run


def ours_and_reference() -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    """(ours, transformers on Pillow's image): bytes -> pixel_values."""
    from PIL import Image
    from sglang.srt.utils import common
    from transformers import Qwen2VLImageProcessor

    import vlm_fastpath
    from vlm_fastpath.bench.checkpoints import QWEN25_VL_CFG
    from vlm_fastpath.imaging.decode import speculation
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    vlm_fastpath.apply("sglang", ["sglang-fast-image-decode"])
    row = next(r for r in vlm_fastpath.status("sglang")
               if r["name"] == "sglang-fast-image-decode")
    if row["status"] != "applied":
        raise SystemExit(f"sglang-fast-image-decode did not apply: {row.get('reason')}")
    args = {k: v for k, v in QWEN25_VL_CFG.items()
            if k not in ("image_processor_type", "processor_class")}
    hf = Qwen2VLImageProcessor(**args)
    fast = FastQwen2VLImageProcessor.from_hf(hf)
    # as SGLang's Qwen patch offers the processor it hands out: a large JPEG or PNG is
    # patchified strip by strip while SGLang's loader decodes it (imaging.decode.speculation)
    speculation.offer(fast)

    def ours(data: bytes) -> Any:
        image, _ = common.load_image(data, gpu_image_decode=False)
        return fast(images=[image.convert("RGB")], return_tensors="pt")["pixel_values"]

    def reference(data: bytes) -> Any:
        image = Image.open(io.BytesIO(data))
        image.load()
        return hf(images=[image.convert("RGB")], return_tensors="pt")["pixel_values"]

    return ours, reference


def paired(*sides: Callable[[], Any], repeats: int) -> tuple[float, ...]:
    """Median seconds of each side, their order reversed every other round."""
    times: list[list[float]] = [[] for _ in sides]
    order = list(range(len(sides)))
    for k in range(repeats):
        for side in (order if k % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - t0)
    return tuple(statistics.median(t) for t in times)


def pickled_mib(tensor: Any) -> float:
    import pickle

    return len(pickle.dumps(tensor)) / 2**20


def main(argv: list[str] | None = None) -> int:
    import sglang
    import torch

    from benchmarks.decode_libraries import encode, noisy_photo, photo_like, screenshot_like
    from vlm_fastpath.qwen_integration import compact

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    native = native_preprocess()
    ours, reference = ours_and_reference()
    items = []
    for i, (w, h) in enumerate(SIZES[:1] if args.quick else SIZES):
        rgb = photo_like(w, h, 100 + i)
        for fmt, pil_name, params in FORMATS:
            items.append((fmt, f"{w}x{h}", encode(rgb, pil_name, **params)))
    if not args.quick:  # issue #51: a camera-noisy 12 MP photo and a screen capture as PNG
        items.append(("png", "4032x3024 noisy photo", encode(noisy_photo(4032, 3024, 51), "PNG")))
        items.append(("png", "2560x1440 screenshot",
                      encode(screenshot_like(2560, 1440, 51), "PNG")))
    rows = []
    for fmt, label, data in items:
        want = reference(data)
        ours_exact = torch.equal(ours(data), want)
        theirs = native(data)
        native_exact = theirs.shape == want.shape and torch.equal(theirs, want)
        with compact.emitting():
            small = ours(data)
        compact_exact = torch.equal(compact.expand(small, 3, 2, 14), want)

        def ours_compact(d: bytes = data) -> Any:
            with compact.emitting():
                return ours(d)

        t_ours, t_native, t_compact = paired(lambda d=data: ours(d), lambda d=data: native(d),
                                             ours_compact, repeats=args.repeats)
        rows.append(dict(fmt=fmt, size=label, ours_ms=t_ours * 1e3,
                         native_ms=t_native * 1e3, speedup=t_native / t_ours,
                         compact_ms=t_compact * 1e3, compact_speedup=t_native / t_compact,
                         full_mib=pickled_mib(want), compact_mib=pickled_mib(small),
                         ours_exact=ours_exact and compact_exact, native_exact=native_exact))
        print(f"done {fmt} {label}", file=sys.stderr, flush=True)
    print(f"# SGLang {sglang.__version__}: bytes -> Qwen2.5-VL pixel_values, medians of "
          f"{args.repeats} alternated calls, load {os.getloadavg()[0]:.1f}\n")
    print("| format | size | SGLang native ms | vlm-fastpath ms | ours x native | "
          "ours compact ms | compact x native | MiB to scheduler (full / compact) | "
          "ours exact | native exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['fmt']} | {r['size']} | {r['native_ms']:.1f} | {r['ours_ms']:.1f} | "
              f"{r['speedup']:.2f}x | {r['compact_ms']:.1f} | {r['compact_speedup']:.2f}x | "
              f"{r['full_mib']:.1f} / {r['compact_mib']:.1f} | {r['ours_exact']} | "
              f"{r['native_exact']} |")
    faster = sum(r["speedup"] > 1 for r in rows)
    print(f"\nours faster on {faster} of {len(rows)} rows (target: every row); "
          f"exact on {sum(r['ours_exact'] for r in rows)} of {len(rows)} "
          f"(native: {sum(r['native_exact'] for r in rows)})")
    ok = all(r["ours_exact"] for r in rows)
    if not ok:
        print("NOT EXACT: a row of ours differs from transformers'", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
