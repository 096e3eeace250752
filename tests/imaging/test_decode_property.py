"""Hypothesis over sizes, qualities and encoder settings: the decode layer gives Pillow's image."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.decode_corpus import photo_like, save
from vlm_fastpath.imaging import decode

pytestmark = pytest.mark.skipif(
    decode.unavailable_reason() is not None,
    reason=f"no verified codec library here: {decode.unavailable_reason()}",
)

SIZES = st.tuples(st.integers(1, 300), st.integers(1, 300))
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def check(data: bytes) -> None:
    ref = Image.open(io.BytesIO(data))
    ref.load()
    fast = decode.decode_opened(Image.open(io.BytesIO(data)))
    assert fast is not None, "a covered variant must take the fast path"
    assert (fast.mode, fast.size, fast.info) == (ref.mode, ref.size, ref.info)
    assert fast.tobytes() == ref.tobytes()


@SETTINGS
@given(size=SIZES, seed=st.integers(0, 2**16), quality=st.integers(1, 100),
       subsampling=st.sampled_from([0, 1, 2]), progressive=st.booleans(),
       restart=st.sampled_from([0, 1, 5]), gray=st.booleans())
def test_jpeg(size, seed, quality, subsampling, progressive, restart, gray):
    w, h = size
    image = Image.fromarray(photo_like(w, h, seed, 1 if gray else 3))
    params = dict(quality=quality, progressive=progressive)
    if not gray:
        params["subsampling"] = subsampling
    if restart:
        params["restart_marker_blocks"] = restart
    check(save(image, "JPEG", **params))


@SETTINGS
@given(size=SIZES, seed=st.integers(0, 2**16), mode=st.sampled_from(["L", "LA", "RGB", "RGBA"]),
       level=st.integers(0, 9), interlace=st.booleans())
def test_png(size, seed, mode, level, interlace):
    w, h = size
    rgba = photo_like(w, h, seed, 4)
    pick = {"L": [0], "LA": [0, 3], "RGB": [0, 1, 2], "RGBA": [0, 1, 2, 3]}[mode]
    pixels = rgba[..., pick].copy()
    image = Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode)
    check(save(image, "PNG", compress_level=level, interlace=int(interlace)))


@SETTINGS
@given(size=SIZES, seed=st.integers(0, 2**16), alpha=st.booleans(), lossless=st.booleans(),
       quality=st.integers(0, 100), method=st.integers(0, 6))
def test_webp(size, seed, alpha, lossless, quality, method):
    w, h = size
    image = Image.fromarray(photo_like(w, h, seed, 4 if alpha else 3))
    check(save(image, "WEBP", lossless=lossless, quality=quality, method=method))
