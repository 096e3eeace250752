"""``png-deflate`` (libdeflate inflate, our unfilter) against Pillow's own decode of the same file.

Pillow writes each row with the filter its encoder picks; ``decode_corpus.filtered_png``
writes the filter asked for, so every type (None, Sub, Up, Average, Paeth) meets every mode
(L, LA, RGB, RGBA), first rows included (where the row above is zeros). The reference is
always ``Image.open(...).load()`` on the same bytes. Broken image data must come out as
Pillow's outcome (its image or its error), which means our path declined it.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import decode_corpus
from fixtures.decode_corpus import filtered_png, filtered_rows, photo_like
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import layer, variants

pytestmark = pytest.mark.skipif(
    layer.decoder_for("png-deflate") is None,
    reason="no png-deflate decoder here (imagecodecs or numba missing, or unverified)",
)

MODES = {"L": [0], "LA": [0, 3], "RGB": [0, 1, 2], "RGBA": [0, 1, 2, 3]}
FILTERS = {"none": [0], "sub": [1], "up": [2], "average": [3], "paeth": [4],
           "mixed": [4, 1, 3, 0, 2, 2, 4]}


def pixels_of(mode: str, width: int, height: int, seed: int) -> np.ndarray:
    rgba = photo_like(width, height, seed, 4)
    picked = rgba[..., MODES[mode]]
    return picked[..., 0].copy() if mode == "L" else picked.copy()


def pillow_outcome(data: bytes):
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return ("raised", type(exc), str(exc))
    return ("image", image.mode, image.size, image.info, image.tobytes())


def ours_outcome(data: bytes):
    try:
        image = decode.decode_bytes(data)
    except Exception as exc:  # noqa: BLE001
        return ("raised", type(exc), str(exc))
    return ("image", image.mode, image.size, image.info, image.tobytes())


@pytest.fixture
def only_png_deflate(monkeypatch):
    """libpng's decoder refuses: whatever comes back fast was png-deflate's."""

    def refuse(data: bytes, out: np.ndarray) -> np.ndarray:
        raise RuntimeError("png-8bit must not serve this input")

    layer.decoder_for("png-8bit")
    monkeypatch.setitem(layer._DECODERS, "png-8bit", refuse)


def fast_equals_pillow(data: bytes, pixels: np.ndarray | None = None) -> None:
    ref = Image.open(io.BytesIO(data))
    ref.load()
    if pixels is not None:  # the fixture's filters are right: Pillow reads the pixels back
        assert ref.tobytes() == pixels.tobytes()
    opened = Image.open(io.BytesIO(data))
    assert variants.variant(opened, data) == "png-deflate"
    fast = decode.decode_opened(opened)
    assert fast is not None, "png-deflate must decode it"
    assert (fast.mode, fast.size, fast.info) == (ref.mode, ref.size, ref.info)
    assert fast.tobytes() == ref.tobytes()


@pytest.mark.parametrize("filters", FILTERS, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [(1, 1), (1, 9), (9, 1), (2, 2), (61, 37), (300, 7)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_filter_and_mode(only_png_deflate, filters, mode, size):
    pixels = pixels_of(mode, *size, seed=size[0] * 7 + size[1])
    fast_equals_pillow(filtered_png(pixels, FILTERS[filters]), pixels)


def test_extreme_bytes_wrap_as_pillow(only_png_deflate):
    """Sums past 255 and differences below 0 in every filter: all-0, all-255, alternating."""
    rng = np.random.default_rng(3)
    for pixels in (np.zeros((5, 6, 3), np.uint8), np.full((5, 6, 4), 255, np.uint8),
                   (np.indices((9, 11)).sum(0) % 2 * 255).astype(np.uint8),
                   rng.integers(0, 256, (17, 13, 3), np.uint8)):
        for filters in FILTERS.values():
            fast_equals_pillow(filtered_png(pixels, filters), pixels)


def test_many_idat_chunks_and_levels(only_png_deflate):
    pixels = pixels_of("RGB", 97, 53, seed=8)
    for idat_bytes in (1, 7, 4096):
        for level in (0, 1, 9):
            fast_equals_pillow(filtered_png(pixels, [4, 3, 1], level, idat_bytes), pixels)


def test_pillows_own_files_and_photographs(only_png_deflate):
    items = [i for i in (*decode_corpus.png_items(), *decode_corpus.photographs())
             if i.fast and i.name.startswith("png") and "interlaced" not in i.name]
    assert len(items) >= 8
    for item in items:
        fast_equals_pillow(item.data)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(width=st.integers(1, 160), height=st.integers(1, 40), mode=st.sampled_from(list(MODES)),
       seed=st.integers(0, 2**16), filters=st.lists(st.integers(0, 4), min_size=1, max_size=9),
       idat_bytes=st.sampled_from([None, 1, 100]), noise=st.booleans())
def test_any_rows_any_filters(only_png_deflate, width, height, mode, seed, filters,
                              idat_bytes, noise):
    pixels = pixels_of(mode, width, height, seed)
    if noise:
        pixels = np.random.default_rng(seed).integers(0, 256, pixels.shape, np.uint8)
    fast_equals_pillow(filtered_png(pixels, filters, idat_bytes=idat_bytes), pixels)


def _broken(kind: str) -> bytes:
    pixels = pixels_of("RGB", 31, 12, seed=2)
    raw = filtered_rows(pixels, [4, 1, 2, 3])
    if kind == "unknown-filter":
        return filtered_png(pixels, [4, 1, 5, 3])
    if kind == "unknown-filter-first-row":
        return filtered_png(pixels, [9, 1])
    if kind == "bad-adler":
        stream = zlib.compress(raw)
        return filtered_png(pixels, [0], stream=stream[:-1] + bytes([stream[-1] ^ 1]))
    if kind == "no-adler":
        return filtered_png(pixels, [0], stream=zlib.compress(raw)[:-4])
    if kind == "an-extra-row":
        return filtered_png(pixels, [0], stream=zlib.compress(raw + raw[: len(raw) // 12]))
    if kind == "a-row-short":
        return filtered_png(pixels, [0], stream=zlib.compress(raw[: -len(raw) // 12]))
    if kind == "bytes-after-the-stream":
        return filtered_png(pixels, [0], stream=zlib.compress(raw) + b"trailing")
    if kind == "not-deflate":
        return filtered_png(pixels, [0], stream=b"\x78\x9c" + bytes(range(200)))
    raise AssertionError(kind)


BROKEN = ["unknown-filter", "unknown-filter-first-row", "bad-adler", "no-adler",
          "an-extra-row", "a-row-short", "bytes-after-the-stream", "not-deflate"]


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_image_data_has_pillows_outcome(only_png_deflate, kind):
    data = _broken(kind)
    assert ours_outcome(data) == pillow_outcome(data)


def test_unknown_filter_is_refused_not_guessed():
    """The decoder itself raises on a filter type it does not know (the layer then hands the
    file to Pillow): it never writes a guess."""
    data = _broken("unknown-filter")
    decoder = layer.decoder_for("png-deflate")
    out = np.empty((12, 31, 3), np.uint8)
    with pytest.raises(ValueError, match="row 2 has an unknown filter type 5"):
        decoder(data, out)


@pytest.mark.parametrize("kind, message", [
    ("a-row-short", "inflates to 1034 bytes, not 1128"), ("an-extra-row", "INSUFFICIENT_SPACE"),
    ("bad-adler", "BAD_DATA"), ("not-deflate", "BAD_DATA")])
def test_the_decoder_refuses_data_of_another_length_or_checksum(kind, message):
    """Refused by the decoder itself, whatever a recycled buffer's stale bytes would make of
    the rows it lacks (Pillow then decides: a short stream is an image to Pillow, padded)."""
    decoder = layer.decoder_for("png-deflate")
    with pytest.raises(Exception, match=message):
        decoder(_broken(kind), np.empty((12, 31, 3), np.uint8))


def test_the_probe_loads_no_kernel_and_the_first_png_loads_every_size():
    """In a fresh process: an engine patch's probe (run while it applies, maybe inside the
    engine's start-up) imports no numba, since llvmlite loaded then breaks vLLM 0.32's CPU
    worker start-up; the first PNG decoded loads the unfilter of every pixel size."""
    script = (
        "import sys\n"
        "from PIL import Image\n"
        "from fixtures.decode_corpus import filtered_png, photo_like\n"
        "from vlm_fastpath.imaging import decode\n"
        "assert decode.probe_mismatch(Image.open) is None\n"
        "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))\n"
        "decode.decode_bytes(filtered_png(photo_like(5, 3, 1), [4]))\n"
        "from vlm_fastpath.imaging import _numba_png_filters as kernels\n"
        "print(sorted(len(f.signatures) for f in kernels.UNFILTER.values()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=True, cwd=Path(__file__).parents[2])
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "[1, 1, 1, 1]"]


def test_numba_off_means_libpng(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_NUMBA", "0")
    monkeypatch.setattr(layer, "_DECODERS", {})
    assert layer.decoder_for("png-deflate") is None
    pixels = pixels_of("RGBA", 40, 30, seed=4)
    data = filtered_png(pixels, [4, 2])
    fast = decode.decode_opened(Image.open(io.BytesIO(data)))
    assert fast is not None  # libpng (png-8bit) decoded it
    assert fast.tobytes() == pixels.tobytes()
    assert "png-deflate" not in decode.available() and "png-8bit" in decode.available()
