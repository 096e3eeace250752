"""Deferred preprocessing: bytes crossing the process boundary per request, and owner time.

For each workload the sender (``DeferredKimiProcessor.prepare``) picks every item's transport
form; the table shows what the eager path would ship (float32 ``pixel_values``), what the
deferred payload ships (pixel data, and the whole pickled payload), the sender's and the
owner's CPU time (median), and that the owner's result equals the eager path (``torch.equal``).

Run: ``python -m benchmarks.deferred_payload [--quick] [--repeats N] [--torch-pillow]``.
"""

from __future__ import annotations

import argparse
import io
import pickle
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL
import torch
from PIL import Image

from fixtures.reference_kimi import KIMI_K25_CFG
from vlm_fastpath.kimi_integration.deferred import DeferredKimiProcessor

MIB = float(1 << 20)


def _encode(image: Image.Image, fmt: str, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _noise(count: int, w: int, h: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            for _ in range(count)]


def _photos(count: int, w: int, h: int, sigma: float = 0.0, seed: int = 0) -> list[Image.Image]:
    """scikit-image photographs resized to w x h; ``sigma``: sensor-like gaussian noise."""
    from skimage import data

    sources = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(),
               data.immunohistochemistry()]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        image = Image.fromarray(sources[i % len(sources)]).resize((w, h), Image.Resampling.LANCZOS)
        if sigma:
            noisy = np.asarray(image).astype(np.float32) + rng.normal(0, sigma, (h, w, 3))
            image = Image.fromarray(np.clip(noisy.round(), 0, 255).astype(np.uint8))
        out.append(image)
    return out


def workloads(quick: bool) -> list[tuple[str, list[Any]]]:
    n = 2 if quick else 4
    rows: list[tuple[str, list[Any]]] = [
        (f"{n}x1536x1024 decoded (anchor)", _noise(n, 1536, 1024, 1)),
        (f"{n}x1536x1024 JPEG q90 photos", [_encode(i, "JPEG", quality=90)
                                           for i in _photos(n, 1536, 1024)]),
        (f"{n}x1536x1024 JPEG q90 noisy photos", [_encode(i, "JPEG", quality=90)
                                                 for i in _photos(n, 1536, 1024, sigma=4)]),
        (f"{n}x1536x1024 PNG photos", [_encode(i, "PNG") for i in _photos(n, 1536, 1024)]),
        (f"{n}x1536x1024 PNG noise", [_encode(i, "PNG") for i in _noise(n, 1536, 1024, 2)]),
        ("1x4032x3024 JPEG q90 photo", [_encode(_photos(1, 4032, 3024, sigma=3)[0], "JPEG",
                                                quality=90)]),
    ]
    if not quick:
        rows += [
            ("2x6000x4000 decoded (lossless)", _noise(2, 6000, 4000, 3)),
            ("1x6000x4000 PNG noise", [_encode(_noise(1, 6000, 4000, 4)[0], "PNG",
                                               compress_level=1)]),
            ("1x6000x4000 PNG photo", [_encode(_photos(1, 6000, 4000)[0], "PNG",
                                               compress_level=1)]),
        ]
    return rows


@dataclass
class Row:
    workload: str
    forms: str
    eager_mib: float
    payload_mib: float
    pickled_mib: float
    prepare_ms: float
    owner_ms: float
    owner_torch_ms: float | None
    exact: bool


def _median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def measure(name: str, images: list[Any], proc: DeferredKimiProcessor, repeats: int,
            torch_pillow: bool) -> Row:
    medias = [{"type": "image", "image": image} for image in images]
    eager = proc.eager(medias)
    prepare_ms, payload = _median_ms(lambda: proc.prepare(medias), repeats)
    blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    received = pickle.loads(blob)
    owner_ms, out = _median_ms(lambda: proc.run(received, "cpu", "pillow"), repeats)
    exact = torch.equal(out["pixel_values"], eager["pixel_values"])
    torch_ms = None
    if torch_pillow:
        torch_ms, out_t = _median_ms(lambda: proc.run(received, "cpu", "torch-pillow"), 1)
        exact = exact and torch.equal(out_t["pixel_values"], eager["pixel_values"])
    counts = Counter(d.form.value for d in payload.decisions)
    assert payload.payload_bytes <= payload.eager_bytes, name
    return Row(name, ",".join(f"{k}x{v}" for k, v in sorted(counts.items())),
               payload.eager_bytes / MIB, payload.payload_bytes / MIB, len(blob) / MIB,
               prepare_ms, owner_ms, torch_ms, exact)


def format_table(rows: list[Row]) -> str:
    head = (f"{'workload':<36} {'forms':<16} {'eager MiB':>9} {'payload MiB':>11} "
            f"{'pickled MiB':>11} {'ratio':>6} {'prepare ms':>10} {'owner ms':>9} "
            f"{'owner torch ms':>14} exact")
    lines = [head, "-" * len(head)]
    for r in rows:
        torch_ms = "-" if r.owner_torch_ms is None else f"{r.owner_torch_ms:.0f}"
        lines.append(
            f"{r.workload:<36} {r.forms:<16} {r.eager_mib:>9.1f} {r.payload_mib:>11.2f} "
            f"{r.pickled_mib:>11.2f} {r.eager_mib / r.payload_mib:>6.1f} {r.prepare_ms:>10.0f} "
            f"{r.owner_ms:>9.0f} {torch_ms:>14} {r.exact}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 images, no 6000x4000 rows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torch-pillow", action="store_true",
                        help="also time the owner's torch port of Pillow's resize on CPU")
    args = parser.parse_args(argv)
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    print(f"pillow {PIL.__version__}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}; owner on CPU (pillow backend), payload = pixel bytes")
    rows = []
    for name, images in workloads(args.quick):
        rows.append(measure(name, images, proc, args.repeats, args.torch_pillow))
        print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(format_table(rows))
    return 0 if all(r.exact for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
