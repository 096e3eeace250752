"""Bad input through the decode layer: the outcome of Pillow's own path, error class and text.

``outcome`` is what a caller sees: the image (mode, size, info, pixels) or the exception's type
and message. Truncated and corrupt files, empty input, a format outside the allowlist, a
declared size above ``MAX_IMAGE_PIXELS`` (warning) and above twice it (error), and Pillow's
``LOAD_TRUNCATED_IMAGES`` all go the way Pillow goes.
"""

from __future__ import annotations

import io
import re
import warnings

import pytest
from PIL import Image, ImageFile

from fixtures import bad_images, decode_corpus
from vlm_fastpath.imaging import decode

pytestmark = pytest.mark.skipif(
    decode.unavailable_reason() is not None,
    reason=f"no verified codec library here: {decode.unavailable_reason()}",
)

SOURCES = {
    "jpeg": decode_corpus.jpeg_items()[0].data,
    "jpeg-progressive": decode_corpus.jpeg_items()[3].data,
    "jpeg-gray": decode_corpus.jpeg_items()[8].data,
    "png": decode_corpus.png_items()[0].data,
    "png-interlaced": decode_corpus.png_items()[4].data,
    "webp": decode_corpus.webp_items()[0].data,
    "webp-lossless-alpha": decode_corpus.webp_items()[3].data,
}


ADDRESS = re.compile(r"0x[0-9a-f]+")  # the BytesIO in "cannot identify image file <...>"


def outcome(load, data: bytes, formats=None):
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            image = load(data, formats)
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return ("raised", type(exc), ADDRESS.sub("0x?", str(exc)))
    warned = sorted({type(w.message).__name__ for w in caught})
    return ("image", image.mode, image.size, image.info, image.tobytes(), warned)


def pillow(data: bytes, formats=None) -> Image.Image:
    image = Image.open(io.BytesIO(data), formats=formats)
    image.load()
    return image


def ours(data: bytes, formats=None) -> Image.Image:
    return decode.decode_bytes(data, formats)


def truncations(data: bytes) -> list[int]:
    n = len(data)
    cuts = {1, 2, 8, 16, 30, 33, 64, n // 10, n // 4, n // 2, 3 * n // 4, n - 64, n - 13,
            n - 12, n - 8, n - 4, n - 2, n - 1}
    return sorted(c for c in cuts if 0 < c < n)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_truncated(name):
    data = SOURCES[name]
    for cut in truncations(data):
        assert outcome(ours, data[:cut]) == outcome(pillow, data[:cut]), cut


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_truncated_with_load_truncated_images(name, monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    data = SOURCES[name]
    for cut in truncations(data):
        assert outcome(ours, data[:cut]) == outcome(pillow, data[:cut]), cut


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_corrupt(name):
    data = bytearray(SOURCES[name])
    n = len(data)
    for at in (n // 3, n // 2, 2 * n // 3, n - 20):
        for value in (0x00, 0xFF, data[at] ^ 0x5A):
            bad = bytes(data[:at]) + bytes([value]) * 7 + bytes(data[at + 7:])
            assert outcome(ours, bad) == outcome(pillow, bad), (at, value)


@pytest.mark.parametrize("data", [b"", b"\xff\xd8", b"\x89PNG\r\n\x1a\n", b"RIFF\0\0\0\0WEBP",
                                  bad_images.garbage()], ids=["empty", "soi", "png-sig",
                                                              "riff", "garbage"])
def test_empty_and_garbage(data):
    result = outcome(ours, data)
    assert result[0] == "raised"
    assert result == outcome(pillow, data)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_format_outside_the_allowlist(name):
    """Bytes of one format offered where only another is allowed (a wrong extension)."""
    allow = ("GIF",) if not name.startswith("png") else ("JPEG",)
    result = outcome(ours, SOURCES[name], allow)
    assert result[0] == "raised"
    assert result == outcome(pillow, SOURCES[name], allow)


def test_decompression_bomb_error():
    data = bad_images.bomb_png()
    result = outcome(ours, data)
    assert result[1] is Image.DecompressionBombError
    assert result == outcome(pillow, data)


@pytest.mark.parametrize("name", sorted(SOURCES))
@pytest.mark.parametrize("limit_of_area", [0.75, 0.4])  # warning band; error band
def test_max_image_pixels(name, limit_of_area, monkeypatch):
    data = SOURCES[name]
    w, h = Image.open(io.BytesIO(data)).size
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", int(w * h * limit_of_area))
    expected = outcome(pillow, data)
    assert outcome(ours, data) == expected
    if limit_of_area == 0.4:
        assert expected[1] is Image.DecompressionBombError
    else:
        assert expected[0] == "image" and "DecompressionBombWarning" in expected[-1]
