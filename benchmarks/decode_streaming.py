"""Can a maintained streaming JPEG decoder feed the resampler's bands as rows are decoded?

Issue #30 asks for decoding overlapped with the resize: rows of a large image reaching the
bands while the rest decodes. The decoders we use (simplejpeg, imagecodecs, Pillow) decode a
whole image per call and report no progress, and libjpeg's scanline API cannot be driven
through ctypes safely (its error exit must longjmp). libvips (pyvips + pyvips-binary) streams:
an image opened with ``access="sequential"`` decodes only as far as the rows asked for.

This probe measures what such a pipeline could gain, in one process, medians:
- identity: pyvips' pixels against Pillow's ``open`` + ``convert("RGB")`` (4:2:0, 4:2:2,
  4:4:4, progressive; even and odd sizes);
- whole decodes: Pillow, pyvips, simplejpeg (what the decode layer uses for JPEG);
- strips: pyvips pulled in 128-row strips in order, and when the first strip is ready.

Needs pyvips, pyvips-binary and simplejpeg (not project dependencies):
``python -m benchmarks.decode_streaming``.
Result (benchmarks/results/decode_streaming.md): identical pixels, but its whole decode is
no faster than Pillow's and strips add ~15%; overlapping it with our resize on 2 cores would
end where simplejpeg then the resize already ends, so the decode layer keeps simplejpeg.
"""

from __future__ import annotations

import io
import statistics
import time

import numpy as np
from PIL import Image

from benchmarks.decode_libraries import encode, photo_like

STRIP_ROWS = 128
SIZES = ((1024, 1024), (2048, 2048), (4032, 3024), (333, 517), (17, 9))
VARIANTS = {
    "4:2:0 q90": {"quality": 90},
    "4:2:2 q85": {"quality": 85, "subsampling": 1},
    "4:4:4 q95": {"quality": 95, "subsampling": 0},
    "progressive q90": {"quality": 90, "progressive": True},
}


def pillow_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.asarray(image.convert("RGB"))


def vips_rgb(data: bytes) -> np.ndarray:
    import pyvips

    image = pyvips.Image.new_from_buffer(data, "", access="sequential")
    return np.ndarray(buffer=image.write_to_memory(), dtype=np.uint8,
                      shape=(image.height, image.width, image.bands))


def vips_strips(data: bytes) -> float:
    """Every strip in order; returns the seconds to the first one."""
    import pyvips

    start = time.perf_counter()
    image = pyvips.Image.new_from_buffer(data, "", access="sequential")
    first = 0.0
    for y in range(0, image.height, STRIP_ROWS):
        image.crop(0, y, image.width, min(STRIP_ROWS, image.height - y)).write_to_memory()
        if y == 0:
            first = time.perf_counter() - start
    return first


def main() -> None:
    import pyvips
    import simplejpeg

    pyvips.cache_set_max(0)
    print(f"pyvips {pyvips.__version__}, libvips {pyvips.version(0)}.{pyvips.version(1)}."
          f"{pyvips.version(2)}, simplejpeg {simplejpeg.__version__}, Pillow "
          f"{Image.__version__}\n")
    print("| image | pyvips == Pillow |\n|---|---|")
    timed = []
    for i, (w, h) in enumerate(SIZES):
        rgb = photo_like(w, h, 100 + i)
        for name, params in VARIANTS.items():
            data = encode(rgb, "JPEG", **params)
            print(f"| {w}x{h} {name} | {np.array_equal(pillow_rgb(data), vips_rgb(data))} |")
            if w >= 1024 and name in ("4:2:0 q90", "progressive q90"):
                timed.append((f"{w}x{h} {name}", data))
    print("\n| image | Pillow ms | pyvips ms | pyvips strips ms | first strip ms | "
          "simplejpeg ms |\n|---|---|---|---|---|---|")
    for label, data in timed:
        rows = []
        for _ in range(7):
            t0 = time.perf_counter()
            pillow_rgb(data)
            t1 = time.perf_counter()
            vips_rgb(data)
            t2 = time.perf_counter()
            first = vips_strips(data)
            t3 = time.perf_counter()
            simplejpeg.decode_jpeg(data)
            t4 = time.perf_counter()
            rows.append((t1 - t0, t2 - t1, t3 - t2, first, t4 - t3))
        medians = [statistics.median(column) * 1e3 for column in zip(*rows, strict=True)]
        print(f"| {label} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
