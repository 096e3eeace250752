"""Encoded images for the decode tests: every variant issue #30 names, made here by Pillow.

Names start with the format and say the variant; ``fast`` in ``CorpusItem`` is whether the
decode layer's rule table covers it (the tests check that it is taken, or declined, as said).
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class CorpusItem:
    name: str
    data: bytes
    fast: bool  # the decode layer must decode it (else it must leave it to Pillow)


def photo_like(width: int, height: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Smooth colour fields, hard edges and mild noise: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, height // 16), max(2, width // 16), channels), np.uint8)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    base = Image.fromarray(small[..., 0] if channels == 1 else small, mode)
    arr = np.asarray(base.resize((width, height), Image.Resampling.BICUBIC)).astype(np.int16)
    arr = arr.reshape(height, width, channels)
    yy, xx = np.mgrid[0:height, 0:width]
    edges = (((xx // 23) + (yy // 17)) % 2 * 50).astype(np.int16)[..., None]
    noise = rng.integers(-5, 6, arr.shape, np.int16)
    out = np.clip(arr + edges + noise, 0, 255).astype(np.uint8)
    return out[..., 0] if channels == 1 else out


def save(image: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **params)
    return buf.getvalue()


def exif_with_orientation(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def insert_png_chunk(data: bytes, chunk: bytes, after_idat: bool) -> bytes:
    """``data`` with ``chunk`` placed before the first IDAT, or just before IEND."""
    if after_idat:
        at = data.rindex(b"IEND") - 4
    else:
        at = data.index(b"IDAT") - 4
    return data[:at] + chunk + data[at:]


def jpeg_items(width: int = 173, height: int = 131, seed: int = 1) -> list[CorpusItem]:
    rgb = Image.fromarray(photo_like(width, height, seed))
    gray = Image.fromarray(photo_like(width, height, seed + 1, 1))
    items = [
        CorpusItem("jpeg-420", save(rgb, "JPEG", quality=90), True),
        CorpusItem("jpeg-422", save(rgb, "JPEG", quality=85, subsampling=1), True),
        CorpusItem("jpeg-444", save(rgb, "JPEG", quality=95, subsampling=0), True),
        CorpusItem("jpeg-progressive", save(rgb, "JPEG", quality=80, progressive=True), True),
        CorpusItem("jpeg-restart", save(rgb, "JPEG", quality=90, restart_marker_blocks=2), True),
        CorpusItem("jpeg-optimized-q30", save(rgb, "JPEG", quality=30, optimize=True), True),
        CorpusItem("jpeg-1x1", save(rgb.crop((0, 0, 1, 1)), "JPEG"), True),
        CorpusItem("jpeg-odd-17x9", save(rgb.crop((0, 0, 17, 9)), "JPEG"), True),
        CorpusItem("jpeg-gray", save(gray, "JPEG", quality=90), True),
        CorpusItem("jpeg-cmyk", save(rgb.convert("CMYK"), "JPEG"), False),
        CorpusItem("jpeg-trailing-bytes", save(rgb, "JPEG") + b"\x00garbage", True),
    ]
    for orientation in range(1, 9):
        items.append(CorpusItem(
            f"jpeg-exif-orientation-{orientation}",
            save(rgb, "JPEG", exif=exif_with_orientation(orientation)), True))
    return items


def png_items(width: int = 149, height: int = 97, seed: int = 3) -> list[CorpusItem]:
    rgb = photo_like(width, height, seed)
    rgba = photo_like(width, height, seed + 1, 4)
    gray = photo_like(width, height, seed + 2, 1)
    plain = save(Image.fromarray(rgb), "PNG")
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
    return [
        CorpusItem("png-rgb", plain, True),
        CorpusItem("png-rgba", save(Image.fromarray(rgba), "PNG"), True),
        CorpusItem("png-la", save(Image.fromarray(rgba[..., [0, 3]].copy(), "LA"), "PNG"), True),
        CorpusItem("png-gray", save(Image.fromarray(gray), "PNG"), True),
        CorpusItem("png-interlaced", save(Image.fromarray(rgb), "PNG", interlace=1), True),
        CorpusItem("png-rgba-interlaced", save(Image.fromarray(rgba), "PNG", interlace=1), True),
        CorpusItem("png-compress-0", save(Image.fromarray(rgb), "PNG", compress_level=0), True),
        CorpusItem("png-text", save(Image.fromarray(rgb), "PNG", pnginfo=_text()), True),
        CorpusItem("png-gamma", insert_png_chunk(plain, png_chunk(b"gAMA", struct.pack(
            ">I", 100000)), after_idat=False), True),
        CorpusItem("png-exif-before-data", save(Image.fromarray(rgb), "PNG",
                                                exif=exif_with_orientation(6)), True),
        CorpusItem("png-exif-after-data", insert_png_chunk(plain, png_chunk(
            b"eXIf", exif_with_orientation(6)), after_idat=True), False),
        CorpusItem("png-palette-trns", save(palette, "PNG", transparency=0), False),
        CorpusItem("png-palette", save(palette, "PNG"), False),
        CorpusItem("png-rgb-trns", save(Image.fromarray(rgb), "PNG",
                                        transparency=(1, 2, 3)), False),
        CorpusItem("png-16bit", save(Image.fromarray(gray.astype(np.uint16) * 257), "PNG"),
                   False),
        CorpusItem("png-1bit", save(Image.fromarray(gray > 128), "PNG"), False),
        CorpusItem("png-1x1", save(Image.fromarray(rgb[:1, :1]), "PNG"), True),
    ]


def _text():
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "made by the decode tests")
    info.add_itxt("Title", "ünïcode", lang="de", tkey="Titel")
    return info


def webp_items(width: int = 131, height: int = 77, seed: int = 5) -> list[CorpusItem]:
    rgb = Image.fromarray(photo_like(width, height, seed))
    rgba = Image.fromarray(photo_like(width, height, seed + 1, 4))
    frames = [rgb, rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    animated = io.BytesIO()
    frames[0].save(animated, "WEBP", save_all=True, append_images=frames[1:], duration=50)
    return [
        CorpusItem("webp-lossy", save(rgb, "WEBP", quality=80), True),
        CorpusItem("webp-lossless", save(rgb, "WEBP", lossless=True), True),
        CorpusItem("webp-lossy-alpha", save(rgba, "WEBP", quality=70), True),
        CorpusItem("webp-lossless-alpha", save(rgba, "WEBP", lossless=True), True),
        CorpusItem("webp-exif-orientation-3", save(rgb, "WEBP", exif=exif_with_orientation(3)),
                   True),
        CorpusItem("webp-animated", animated.getvalue(), False),
    ]


def other_items() -> list[CorpusItem]:
    rgb = Image.fromarray(photo_like(40, 30, 9))
    return [
        CorpusItem("gif", save(rgb.convert("P"), "GIF"), False),
        CorpusItem("bmp", save(rgb, "BMP"), False),
        CorpusItem("tiff", save(rgb, "TIFF"), False),
    ]


def photographs() -> list[CorpusItem]:
    """The project's real photographs (scikit-image's), as JPEG, PNG and WebP; [] without it."""
    try:
        from skimage import data
    except ImportError:
        return []
    items = []
    for name in ("astronaut", "coffee", "chelsea", "camera"):
        image = Image.fromarray(getattr(data, name)())
        items.append(CorpusItem(f"jpeg-photo-{name}", save(image, "JPEG", quality=92), True))
        items.append(CorpusItem(f"png-photo-{name}", save(image, "PNG"), True))
        items.append(CorpusItem(f"webp-photo-{name}", save(image, "WEBP", quality=85), True))
    return items


def corpus() -> list[CorpusItem]:
    return [*jpeg_items(), *png_items(), *webp_items(), *other_items(), *photographs()]
