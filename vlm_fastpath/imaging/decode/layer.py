"""Exact decoding: an image Pillow opened, decoded by a proven codec library, or not at all.

``decode_opened`` takes what ``Image.open`` returned (the engine opens it: its format
allowlist, ``MAX_IMAGE_PIXELS`` and decompression-bomb checks, its errors) and answers the
image Pillow's ``load()`` would give -- same mode, size, pixels and ``info`` -- or None, and
the caller lets Pillow decode. None also when the fast decoder raises or hands back another
shape: the engine then meets Pillow's own behaviour on that input, errors included.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import numpy as np
from PIL import Image, features

from ... import settings
from ..output_pool import empty_output
from ..resize_pool import POOL_THREAD_PREFIX, get_pool, pool_size
from ..row_progress import RowProgress
from ..row_progress import supported as rows_followable
from . import codecs, decoded_image, jpeg_parts, png_rows, speculation, variants, verified

ENV_SWITCH = "VLM_FASTPATH_FAST_DECODE"  # "0": off; "all": also exact-but-not-faster rows
# From this many pixels on, the offered processor starts on the rows as they are decoded
# (speculation): below it a decode is over before sharing it pays.
OVERLAP_PIXELS = 1 << 21
# ... times this for a variant whose rows come late: png-deflate writes none until its whole
# stream is inflated, then all of them in one short pass, so the work started early mostly
# waits; it pays from 12 MP, not at 4 (benchmarks/results/decode.md, the overlap table).
LATE_ROWS_FACTOR = {"png-deflate": 4}
_CODEC_NAMES = ("libjpeg_turbo", "zlib_ng", "webp")


def enabled() -> bool:
    return _switch() not in ("0", "false", "no", "off")


def _switch() -> str:
    return os.environ.get(ENV_SWITCH, "1").strip().lower()


def _pillow_codecs() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in _CODEC_NAMES:
        try:
            found[name] = features.version(name)
        except Exception:  # noqa: BLE001 - an unknown feature is simply not verified
            found[name] = None
    return found


_DECODERS: dict[str, codecs.Decoder | None] = {}
_PROBING = threading.local()  # ``probe_mismatch`` running on this thread
_FASTER: dict[str, bool] = {}


def decoder_for(variant: str) -> codecs.Decoder | None:
    """The verified decoder of ``variant`` in this process (exact; maybe not faster), or None."""
    if variant in _DECODERS:
        return _DECODERS[variant]
    found = None
    library, factory = codecs.ADAPTERS[variant]
    version = codecs.installed(library)
    rule = None if version is None else verified.find(
        variant, library, version, Image.__version__, _pillow_codecs()
    )
    if rule is not None:
        try:
            found = factory()
        except ImportError:  # a part it needs is missing or switched off (numba)
            found = None
        _FASTER[variant] = rule.faster
    _DECODERS[variant] = found
    return found


def _in_use(variant: str) -> codecs.Decoder | None:
    """``decoder_for``, when its rule is also faster (or the switch says ``all``)."""
    found = decoder_for(variant)
    if found is None or _FASTER.get(variant, True) or _switch() == "all":
        return found
    return None


def available() -> dict[str, str]:
    """variant -> "library version" of every fast decoder in use in this process."""
    out = {}
    for variant in codecs.ADAPTERS:
        if _in_use(variant) is not None:
            library = codecs.ADAPTERS[variant][0]
            out[variant] = f"{library} {codecs.installed(library)}"
    return out


def unavailable_reason() -> str | None:
    """Why no fast decoder can run here, or None when at least one can."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    if available():
        return None
    libs = sorted({lib for lib, _ in codecs.ADAPTERS.values()})
    state = ", ".join(f"{lib} {codecs.installed(lib) or 'not installed'}" for lib in libs)
    return (
        f"no verified codec library for Pillow {Image.__version__} ({state}); "
        "install vlm-fastpath[decode]"
    )


def _source_bytes(image: Image.Image) -> bytes | None:
    """The encoded bytes of an image opened from an in-memory buffer and not yet loaded."""
    fp = getattr(image, "fp", None)
    if not isinstance(fp, io.BytesIO) or getattr(image, "_im", True) is not None:
        return None
    if getattr(image, "tell", lambda: 0)() != 0:
        return None
    return fp.getvalue()


def decode_opened(image: Any) -> Image.Image | None:
    """What ``image.load()`` would make of ``image``, decoded fast; None: let Pillow do it."""
    if not enabled() or not isinstance(image, Image.Image):
        return None
    data = _source_bytes(image)
    if data is None:
        return None
    variant = variants.variant(image, data)
    if variant is None:
        return None
    decode = _in_use(variant)
    if variant in variants.FALLBACK and (decode is None or (
            getattr(_PROBING, "active", False) and not png_rows.ready())):
        # not in use here; or a probe, which must not load png-deflate's kernels (png_rows)
        variant = variants.FALLBACK[variant]
        decode = _in_use(variant)
    if decode is None:
        return None
    width, height = image.size
    channels = decoded_image.CHANNELS.get(image.mode)
    if channels is None or width < 1 or height < 1:
        return None
    # It becomes the image's pixels (decoded_image), not a scratch: memory nobody holds any
    # more, recycled through the output pool (a large decode otherwise spends ~7 % of its
    # time faulting in fresh pages: 4032x3024 JPEG 45.8 ms fresh vs 42.7 ms reused).
    out = empty_output((height, width) if channels == 1 and variant.startswith("png") else
                   (height, width, channels), np.uint8)
    if variant == "jpeg-ycbcr" and _in_parts(data, out):
        return _as_loaded(image, out, variant)
    progress, prepared = _speculate(image, variant, data, out)
    try:
        pixels = decode(data, out)
    except Exception:  # noqa: BLE001 - the library refused it: Pillow decides, errors included
        pixels = None
    if not _filled(pixels, out):
        if progress is not None:
            progress.abort()  # the work stops; nothing it wrote is used
        return None
    if progress is not None:
        progress.done()
    loaded = _as_loaded(image, out, variant)
    if prepared is not None and decoded_image.held_pixels(loaded) is not None:
        speculation.attach(loaded, prepared)
    return loaded


def _speculate(image: Image.Image, variant: str, data: bytes, out: np.ndarray
               ) -> tuple[RowProgress | None, speculation.Prepared | None]:
    """The offered processor's work on ``out``, started before the decode fills it
    (``speculation``, ``row_progress``); ``(None, None)`` where it is not started: no offer,
    a small image, rows that do not come in order, a machine where they cannot be followed,
    a pool thread (its work would queue behind it), enough work running already
    (``speculation.limit``), bytes whose last work nobody took (``speculation.abandoned``),
    or the switch off."""
    width, height = image.size
    if (width * height < OVERLAP_PIXELS * LATE_ROWS_FACTOR.get(variant, 1)
            or not settings.decode_overlap_enabled()
            or not decoded_image.supported() or not variants.rows_in_order(variant, data)
            or threading.current_thread().name.startswith(POOL_THREAD_PREFIX)):
        return None, None
    speculator = speculation.offered()
    if speculator is None or not rows_followable():
        return None, None
    seen = speculation.fingerprint(data)
    if speculation.abandoned(seen) or not speculation.reserve():
        return None, None
    prepared = None
    try:
        progress = RowProgress(out)
        progress.mark()
        prepared = speculator.start(image.mode, out, progress)
    except Exception:  # noqa: BLE001 - speculation never costs the decode anything
        prepared = None
    finally:
        speculation.release(None if prepared is None else prepared.future)
    if prepared is None:
        return None, None
    speculation.watch(prepared, seen)
    return progress, prepared


def _in_parts(data: bytes, out: np.ndarray) -> bool:
    """``out`` filled by decoding a restart-marked JPEG in parts on the resize pool
    (``jpeg_parts``); False: decode it whole (also when a part failed: the whole decode, or
    Pillow after it, then decides)."""
    decode = _in_use("jpeg-parts")
    workers = pool_size()
    if decode is None or workers < 2 or threading.current_thread().name.startswith(
            POOL_THREAD_PREFIX):  # a pool worker waiting on the pool could wait forever
        return False
    try:
        return jpeg_parts.decode_in_parts(data, out, decode, get_pool().submit, workers)
    except Exception:  # noqa: BLE001 - a part refused: the whole image's decode decides
        return False


def _filled(pixels: Any, out: np.ndarray) -> bool:
    """The library wrote ``out`` itself (a view of it, same shape), not an array of its own."""
    return (
        isinstance(pixels, np.ndarray)
        and pixels.dtype == np.uint8
        and pixels.size == out.size
        and np.shares_memory(pixels, out)
        and pixels.__array_interface__["data"][0] == out.__array_interface__["data"][0]
    )


def _as_loaded(image: Image.Image, pixels: np.ndarray, variant: str) -> Image.Image:
    """The loaded image: the decoded array itself, Pillow's store filled only when asked for
    (decoded_image); on a Pillow without that hook, a Pillow image filled now."""
    info = dict(image.info)
    if variant == "webp-still":
        # What Pillow's WebP load adds for the one frame of a still image.
        info.setdefault("timestamp", 0)
        info.setdefault("duration", 0)
    if decoded_image.supported():
        return decoded_image.DecodedImage(pixels, image.mode, info, image.format)
    # Uninitialised, as Pillow's own load allocates it: no zero fill before the copy.
    out = Image.new(image.mode, image.size, None)
    out.frombytes(pixels, "raw", image.mode)
    out.info = info
    out.format = image.format
    return out


def decode_bytes(data: bytes, formats: tuple[str, ...] | list[str] | None = None) -> Image.Image:
    """``Image.open(BytesIO(data), formats=formats)`` then ``load()``: the same image, faster.

    Errors are Pillow's: opening is Pillow's, and Pillow decodes whatever the fast path
    declines.
    """
    image = Image.open(io.BytesIO(data), formats=formats)
    fast = decode_opened(image)
    if fast is not None:
        return fast
    image.load()
    return image


def probe_mismatch(open_image: Any) -> str | None:
    """``behaviour: ...`` unless fast decoding equals Pillow's on small probe images here.

    ``open_image`` is how the engine opens bytes (vLLM's allowlisted ``open_image``, or
    ``Image.open``); patches call this from their contract before they apply, maybe inside an
    engine's start-up, so it loads no numba kernel: a PNG is probed on libpng until
    png-deflate's kernels are loaded (``png_rows.ready``; its exactness is the rule table's).
    """
    _PROBING.active = True
    try:
        return _probe(open_image)
    finally:
        _PROBING.active = False


def _probe(open_image: Any) -> str | None:
    rng = np.random.default_rng(30)
    pixels = rng.integers(0, 256, (19, 23, 4), np.uint8)
    for fmt, mode in (("JPEG", "RGB"), ("JPEG", "L"), ("PNG", "RGBA"), ("WEBP", "RGB")):
        buf = io.BytesIO()
        Image.fromarray(pixels[..., : len(mode)].squeeze(-1) if mode == "L" else
                        pixels[..., : len(mode)], mode).save(buf, fmt)
        data = buf.getvalue()
        ours = decode_opened(open_image(io.BytesIO(data)))
        if ours is None:
            continue  # Pillow decodes this variant here
        ref = open_image(io.BytesIO(data))
        ref.load()
        if (ours.mode, ours.size, ours.info) != (ref.mode, ref.size, ref.info) or (
            ours.tobytes() != ref.tobytes()
        ):
            return f"behaviour: the fast {fmt} {mode} decode differs from Pillow's on a probe"
    return None
