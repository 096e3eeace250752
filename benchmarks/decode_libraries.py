"""Which codec binding decodes like Pillow, and how fast: the measurement behind the choice.

Decodes a generated corpus with Pillow and with every installed candidate binding
(simplejpeg, imagecodecs' jpeg8/png/spng/webp, pyspng), checks pixel identity against Pillow's
``Image.open(...).load()`` and times both in the same process (median of repeats, one thread).
Run: ``python -m benchmarks.decode_libraries`` in an env with the candidates installed.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable

import numpy as np
from PIL import Image, features


def photo_like(width: int, height: int, seed: int, channels: int = 3) -> np.ndarray:
    """Smooth fields, edges and mild noise: compresses like a photograph, not like noise."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, height // 64), max(2, width // 64), channels), np.uint8)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    base = Image.fromarray(small.squeeze(-1) if channels == 1 else small, mode)
    arr = np.asarray(base.resize((width, height), Image.Resampling.BICUBIC)).astype(np.int16)
    arr = arr.reshape(height, width, channels)
    noise = rng.integers(-6, 7, arr.shape, np.int16)
    yy, xx = np.mgrid[0:height, 0:width]
    edges = (((xx // 97) + (yy // 61)) % 2 * 40).astype(np.int16)[..., None]
    out = np.clip(arr + noise + edges, 0, 255).astype(np.uint8)
    return out[..., 0] if channels == 1 else out


def noisy_photo(width: int, height: int, seed: int) -> np.ndarray:
    """A real photograph (scikit-image's chelsea, else ``photo_like``) at this size with
    sensor-like noise (sigma 4): compresses as badly as a camera's PNG (12 MP: ~25 MB)."""
    try:
        from skimage import data as skdata

        base = np.asarray(Image.fromarray(skdata.chelsea()).resize(
            (width, height), Image.Resampling.BICUBIC), np.float32)
    except ImportError:
        base = photo_like(width, height, seed).astype(np.float32)
    noise = np.random.default_rng(seed).normal(0.0, 4.0, base.shape).astype(np.float32)
    return np.clip(base + noise, 0, 255).round().astype(np.uint8)


def screenshot_like(width: int, height: int, seed: int) -> np.ndarray:
    """A desktop capture as a computer-use agent sends one: flat panels, a title bar,
    anti-aliased text in a sidebar and a page, buttons, and one picture on the page."""
    from PIL import ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), (246, 247, 249))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=max(12, height // 75))
    bar, side = height // 28, width // 6
    draw.rectangle((0, 0, width, bar), fill=(32, 33, 36))
    draw.rectangle((0, bar, side, height), fill=(233, 236, 240))
    picture = (side + width // 3, bar + height // 6, side + width // 3 + width // 3,
               bar + height // 6 + height // 3)
    image.paste(Image.fromarray(photo_like(picture[2] - picture[0], picture[3] - picture[1],
                                           seed)), picture[:2])
    words = ("File Edit View Search Settings import return model image request server "
             "Qwen2.5-VL 0.34.0 click button submit agent screenshot the a of to").split()
    step = int(font.size * 1.7)
    for y in range(bar + 10, height - step, step):
        draw.text((12, y), " ".join(rng.choice(words, rng.integers(1, 4))), fill=(70, 72, 76),
                  font=font)
        if picture[1] - step <= y <= picture[3]:
            continue
        draw.text((side + 24, y), " ".join(rng.choice(words, rng.integers(3, 14))),
                  fill=(24, 24, 27), font=font)
    for k in range(6):
        x0 = side + 24 + k * width // 9
        draw.rounded_rectangle((x0, height - 3 * step, x0 + width // 12, height - step),
                               radius=6, fill=tuple(int(v) for v in rng.integers(40, 220, 3)))
    return np.asarray(image)


def encode(arr: np.ndarray, fmt: str, mode: str | None = None, **params) -> bytes:
    img = Image.fromarray(arr, mode) if mode else Image.fromarray(arr)
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def corpus(w: int = 517, h: int = 383) -> dict[str, bytes]:
    rgb = photo_like(w, h, 1)
    rgba = photo_like(w, h, 2, 4)
    gray = photo_like(w, h, 3, 1)
    items = {
        "jpeg 4:2:0 q90": encode(rgb, "JPEG", quality=90),
        "jpeg 4:2:2": encode(rgb, "JPEG", quality=85, subsampling=1),
        "jpeg 4:4:4": encode(rgb, "JPEG", quality=95, subsampling=0),
        "jpeg progressive": encode(rgb, "JPEG", quality=80, progressive=True),
        "jpeg restart markers": encode(rgb, "JPEG", quality=90, restart_marker_blocks=3),
        "jpeg odd 1x1": encode(rgb[:1, :1], "JPEG"),
        "jpeg odd 17x3": encode(rgb[:3, :17], "JPEG"),
        "jpeg grayscale": encode(gray, "JPEG", quality=90),
        "png rgb": encode(rgb, "PNG"),
        "png rgba": encode(rgba, "PNG"),
        "png la": _save(Image.fromarray(rgba[..., [0, 3]].copy(), "LA"), "PNG"),
        "png gray": encode(gray, "PNG"),
        "png interlaced": encode(rgb, "PNG", interlace=1),
        "png P+tRNS": _save(_palette(rgb), "PNG", transparency=0),
        "png 16-bit": _save(Image.fromarray(gray.astype(np.uint16) * 257), "PNG"),
        "webp lossy": encode(rgb, "WEBP", quality=80),
        "webp lossless": encode(rgb, "WEBP", lossless=True),
        "webp lossy alpha": encode(rgba, "WEBP", quality=80),
        "webp lossless alpha": encode(rgba, "WEBP", lossless=True),
    }
    return items


def _save(img: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def _palette(rgb: np.ndarray) -> Image.Image:
    return Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)


def pillow_decode(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    img.load()
    return np.asarray(img)


def candidates() -> dict[str, tuple[str, Callable[[bytes], np.ndarray]]]:
    """name -> (formats it handles, decode function)."""
    found: dict[str, tuple[str, Callable[[bytes], np.ndarray]]] = {}
    try:
        import simplejpeg

        def sj(data: bytes) -> np.ndarray:
            hdr = simplejpeg.decode_jpeg_header(data)
            gray = hdr[2] == "Gray"
            return simplejpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB",
                                          fastdct=False, fastupsample=False, strict=True)
        found[f"simplejpeg {simplejpeg.__version__}"] = ("jpeg", sj)
    except ImportError:
        pass
    try:
        import imagecodecs as ic

        found[f"imagecodecs.jpeg8 {ic.__version__}"] = ("jpeg", ic.jpeg8_decode)
        found[f"imagecodecs.png {ic.__version__}"] = ("png", ic.png_decode)
        found[f"imagecodecs.spng {ic.__version__}"] = ("png", ic.spng_decode)
        found[f"imagecodecs.webp {ic.__version__}"] = ("webp", ic.webp_decode)
    except ImportError:
        pass
    try:
        import pyspng

        found[f"pyspng {pyspng.__version__}"] = ("png", pyspng.load)
    except (ImportError, AttributeError):
        pass
    return found


def timeit(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def identity_table() -> list[tuple[str, str, str]]:
    rows = []
    items = corpus()
    for lib, (fmt, fn) in candidates().items():
        for name, data in items.items():
            if not name.startswith(fmt):
                continue
            ref = pillow_decode(data)
            try:
                got = np.asarray(fn(data))
                got = got.reshape(ref.shape) if got.size == ref.size else got
                if got.shape != ref.shape:
                    verdict = f"shape {got.shape} vs {ref.shape}"
                elif got.dtype != ref.dtype:
                    verdict = f"dtype {got.dtype} vs {ref.dtype}"
                else:
                    diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
                    verdict = "identical" if diff == 0 else f"differs (max {diff})"
            except Exception as exc:  # noqa: BLE001 - a verdict, not a failure
                verdict = f"raises {type(exc).__name__}"
            rows.append((lib, name, verdict))
    return rows


def speed_table(sizes=((1024, 1024), (2048, 2048), (4032, 3024)), repeats: int = 7):
    rows = []
    for w, h in sizes:
        rgb = photo_like(w, h, 7)
        rgba = photo_like(w, h, 8, 4)
        data = {
            "jpeg": encode(rgb, "JPEG", quality=90),
            "png": encode(rgb, "PNG"),
            "png-rgba": encode(rgba, "PNG"),
            "webp": encode(rgb, "WEBP", quality=80),
            "webp-ll": encode(rgb, "WEBP", lossless=True),
        }
        for fmt, blob in data.items():
            base = timeit(lambda b=blob: pillow_decode(b), repeats)
            for lib, (lfmt, fn) in candidates().items():
                if not fmt.startswith(lfmt):
                    continue
                t = timeit(lambda b=blob, f=fn: f(b), repeats)
                rows.append((f"{w}x{h}", fmt, lib, base * 1e3, t * 1e3, base / t))
    return rows


def main() -> None:
    print(f"Pillow {Image.__version__}: libjpeg-turbo {features.version('libjpeg_turbo')}, "
          f"zlib-ng {features.version('zlib_ng')}, libwebp {features.version('webp')}")
    print("\n| library | input | vs Pillow |\n|---|---|---|")
    for lib, name, verdict in identity_table():
        print(f"| {lib} | {name} | {verdict} |")
    print("\n| size | input | library | Pillow ms | lib ms | speed-up |\n|---|---|---|---|---|---|")
    for size, fmt, lib, base, t, ratio in speed_table():
        print(f"| {size} | {fmt} | {lib} | {base:.1f} | {t:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
