"""Device check of deferred preprocessing's owner side: Pillow parity and time (< 5 min).

1. Resize parity on ``--device``: the torch port of Pillow's bicubic (``torch-pillow``, the
   default off-CPU) and ``interpolate(bicubic, antialias=True)`` + round/clamp
   (``torch-antialias``) against Pillow, for random images and photographs at Kimi sizes
   (2048x2048 -> 1795x1795, 4032x3024 -> 2069x1551, 1536x1024 video frames -> 1001x668):
   the |diff| histogram (0, 1, 2, >2) and the share within one level (bar: >= 99.9%).
2. End to end: ``DeferredKimiProcessor.run`` on the device for raw and encoded payloads,
   compared with the eager CPU path (``torch.equal`` expected for torch-pillow), timed with
   device synchronization (median of ``--repeats``).

Run: ``python benchmarks/gpu/deferred_check.py [--device cuda|cpu] [--quick]``.
Exit status 1 when torch-pillow is not exact (the antialias path is reported, not required:
it misses 99.9% on random noise because it has no clamped 8-bit intermediate).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fixtures.reference_kimi import KIMI_K25_CFG  # noqa: E402
from vlm_fastpath.kimi_integration.deferred import (  # noqa: E402
    DeferredKimiProcessor,
    MismatchHistogram,
    mismatch_histogram,
    pillow_resize,
    torch_antialias_resize,
)

RESIZERS = {"torch-pillow": pillow_resize, "torch-antialias": torch_antialias_resize}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _photo(w: int, h: int, index: int) -> np.ndarray:
    from skimage import data

    sources = [data.astronaut, data.coffee, data.chelsea, data.rocket]
    image = Image.fromarray(sources[index % len(sources)]()).resize((w, h), Image.LANCZOS)
    return np.asarray(image)


def _noise(w: int, h: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def parity_cases(quick: bool, tiny: bool = False) -> list[tuple[str, list[np.ndarray], int, int]]:
    """Kimi-sized cases; ``tiny``: two small ones, for the CPU dry run of check_all.py."""
    if tiny:
        return [("random 128x96->89x67", [_noise(128, 96, 70)], 89, 67),
                ("photo 128x96->89x67", [_photo(128, 96, 0)], 89, 67)]
    n = 1 if quick else 2
    cases = [
        ("random 2048x2048->1795x1795", [_noise(2048, 2048, i) for i in range(n)], 1795, 1795),
        ("photo 2048x2048->1795x1795", [_photo(2048, 2048, i) for i in range(n)], 1795, 1795),
        ("random 1536x1024->1001x668", [_noise(1536, 1024, 9 + i) for i in range(n)], 1001, 668),
        ("photo 1536x1024->1001x668", [_photo(1536, 1024, i) for i in range(n)], 1001, 668),
    ]
    if not quick:
        cases += [
            ("random 4032x3024->2069x1551", [_noise(4032, 3024, 20)], 2069, 1551),
            ("photo 4032x3024->2069x1551", [_photo(4032, 3024, 1)], 2069, 1551),
            ("photo 3024x4032->1551x2069", [_photo(3024, 4032, 2)], 1551, 2069),
        ]
    return cases


def check_parity(device: torch.device, quick: bool, tiny: bool = False,
                 records: list[dict[str, Any]] | None = None) -> dict[str, MismatchHistogram]:
    """Histogram per case and resizer; ``records`` (if given) gets one dict per row."""
    totals = {name: MismatchHistogram() for name in RESIZERS}
    print(f"{'case':<30} {'resizer':<16} {'ms/batch':>9}  histogram |ours - Pillow|")
    for name, arrays, ow, oh in parity_cases(quick, tiny):
        reference = torch.stack([
            torch.from_numpy(np.array(Image.fromarray(a).resize((ow, oh), Image.BICUBIC)))
            .permute(2, 0, 1) for a in arrays
        ])
        batch = torch.stack([torch.from_numpy(a).permute(2, 0, 1) for a in arrays]).to(device)
        for resizer, fn in RESIZERS.items():
            fn(batch[:1], ow, oh)  # warm-up (coefficients, kernels)
            _sync(device)
            start = time.perf_counter()
            out = fn(batch, ow, oh)
            _sync(device)
            ms = (time.perf_counter() - start) * 1000
            hist = mismatch_histogram(out, reference)
            totals[resizer] += hist
            if records is not None:
                records.append({"case": name, "resizer": resizer, "ms": round(ms, 3),
                                "hist": [hist.zero, hist.one, hist.two, hist.more],
                                "max_diff": hist.max_diff})
            print(f"{name:<30} {resizer:<16} {ms:>9.1f}  {hist.row()}", flush=True)
    for resizer, hist in totals.items():
        print(f"TOTAL {resizer:<16} {hist.row()}")
    return totals


def _encode(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _workloads(quick: bool, tiny: bool) -> list[tuple[str, list[Any], Any]]:
    if tiny:
        return [("1x224x168 raw", [_noise(224, 168, 41)], None),
                ("1x224x168 JPEG", [_encode(_photo(224, 168, 1))], None)]
    n = 2 if quick else 4
    return [
        (f"{n}x1536x1024 raw", [_noise(1536, 1024, 40 + i) for i in range(n)], None),
        (f"{n}x2048x2048 raw", [_noise(2048, 2048, 50 + i) for i in range(n)], None),
        (f"{n}x1536x1024 JPEG", [_encode(_photo(1536, 1024, i)) for i in range(n)], None),
        (f"{n}x RGBA 1200x900 chessboard",
         [np.random.default_rng(60 + i).integers(0, 256, (900, 1200, 4), dtype=np.uint8)
          for i in range(n)], "chessboard"),
    ]


def check_end_to_end(device: torch.device, quick: bool, repeats: int, tiny: bool = False,
                     records: list[dict[str, Any]] | None = None) -> bool:
    """Owner path on ``device`` vs the eager CPU path; True when torch-pillow is identical."""
    workloads = _workloads(quick, tiny)
    ok = True
    print(f"\n{'workload':<30} {'backend':<16} {'owner ms':>9} {'payload MiB':>11} "
          f"{'eager MiB':>9}  vs eager")
    for name, images, bg in workloads:
        proc = DeferredKimiProcessor(KIMI_K25_CFG, background=bg)
        medias = [{"type": "image", "image": image} for image in images]
        eager = proc.eager(medias)["pixel_values"]
        payload = proc.prepare(medias)
        for backend in ("torch-pillow", "torch-antialias"):
            proc.run(payload, device, backend)  # warm-up
            times = []
            for _ in range(repeats):
                _sync(device)
                start = time.perf_counter()
                out = proc.run(payload, device, backend)["pixel_values"]
                _sync(device)
                times.append((time.perf_counter() - start) * 1000)
            out = out.cpu()
            if torch.equal(out, eager):
                verdict = "identical"
            else:
                # pixel_values are (v/255 - 0.5)/0.5: one uint8 level is 2/255
                levels = ((out - eager).abs() * 127.5).round()
                verdict = (f"within 1 level: {100 * float((levels <= 1).float().mean()):.4f}%,"
                           f" max {int(levels.max())} levels")
                ok = ok and backend != "torch-pillow"
            if records is not None:
                records.append({"workload": name, "backend": backend,
                                "owner_ms": round(statistics.median(times), 3),
                                "identical": verdict == "identical", "verdict": verdict,
                                "payload_mib": round(payload.payload_bytes / 2**20, 3),
                                "eager_mib": round(payload.eager_bytes / 2**20, 3)})
            print(f"{name:<30} {backend:<16} {statistics.median(times):>9.1f} "
                  f"{payload.payload_bytes / 2**20:>11.2f} {payload.eager_bytes / 2**20:>9.1f}"
                  f"  {verdict}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available; use --device cpu", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), torch {torch.__version__}, pillow {Image.__version__}")
    start = time.perf_counter()
    totals = check_parity(device, args.quick)
    ok = totals["torch-pillow"].zero == totals["torch-pillow"].total
    ok = check_end_to_end(device, args.quick, args.repeats) and ok
    aa = totals["torch-antialias"].within_one
    print(f"\ntorch-pillow exact: {totals['torch-pillow'].exact == 1.0}; torch-antialias within "
          f"one level: {100 * aa:.4f}% (bar 99.9%: {'met' if aa >= 0.999 else 'MISSED'}); "
          f"{time.perf_counter() - start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
