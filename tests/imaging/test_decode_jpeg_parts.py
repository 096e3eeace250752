"""A restart-marked JPEG decoded in parts (``jpeg_parts``) is Pillow's image, byte for byte.

Reference: Pillow 13.0.0's own decode of the same bytes in this process. The corpus covers
each chroma sampling (vertical context or not), restart intervals of rows and of blocks that
allow cuts at every row, every eighth row or only some, odd sizes, and 2 to 5 parts; each case
also says whether it must be cut, so a test cannot pass by decoding whole.
"""

from __future__ import annotations

import io
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.decode_corpus import photo_like, save
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import jpeg_parts, layer

pytestmark = pytest.mark.skipif(layer.decoder_for("jpeg-parts") is None,
                                reason="no verified decoder for JPEG parts here")

SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
POOL = ThreadPoolExecutor(4)


def encoded(width: int, height: int, sampling: str, seed: int = 7, quality: int = 90,
            **restart: int) -> bytes:
    image = Image.fromarray(photo_like(width, height, seed))
    return save(image, "JPEG", quality=quality, subsampling=SUBSAMPLING[sampling], **restart)


def pillow_rgb(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    image.load()
    return np.asarray(image)


def in_parts(data: bytes, parts: int) -> np.ndarray | None:
    """The image decoded in ``parts`` parts, or None where it is not cut."""
    width, height = Image.open(io.BytesIO(data)).size
    out = np.full((height, width, 3), 77, np.uint8)  # rows nobody writes stay visible
    done = jpeg_parts.decode_in_parts(data, out, layer.decoder_for("jpeg-parts"), POOL.submit,
                                      parts)
    return out if done else None


@pytest.fixture(autouse=True)
def _small_parts(monkeypatch):
    monkeypatch.setattr(jpeg_parts, "MIN_PART_PIXELS", 1)


# (width, height, sampling, restart params, must be cut in 2 parts)
CASES = [
    (1021, 777, "4:2:0", {"restart_marker_rows": 1}, True),
    (1021, 777, "4:2:2", {"restart_marker_rows": 1}, True),
    (1021, 777, "4:4:4", {"restart_marker_rows": 1}, True),
    # markers every second row: no cut where the upper part needs the next row (4:2:0),
    # cuts at every 16th row where it does not (4:2:2)
    (1024, 768, "4:2:0", {"restart_marker_rows": 2}, False),
    (1024, 768, "4:2:2", {"restart_marker_rows": 2}, True),
    (1021, 777, "4:2:0", {"restart_marker_blocks": 1}, True),
    (1021, 777, "4:2:0", {"restart_marker_blocks": 4}, True),
    (1021, 777, "4:4:4", {"restart_marker_blocks": 5}, True),
    (333, 517, "4:2:0", {"restart_marker_blocks": 3}, True),
    (2048, 2048, "4:2:0", {"restart_marker_blocks": 3}, False),  # no marker starts a row
    (640, 480, "4:2:0", {}, False),  # no restart markers
    (64, 16, "4:2:0", {"restart_marker_rows": 1}, False),  # one MCU row: nowhere to cut
]


@pytest.mark.parametrize(("width", "height", "sampling", "restart", "cut"), CASES,
                         ids=lambda v: str(v))
@pytest.mark.parametrize("parts", [2, 3, 5, 8])  # 8: the pool's most workers
def test_parts_are_pillows_pixels(width, height, sampling, restart, cut, parts):
    data = encoded(width, height, sampling, **restart)
    got = in_parts(data, parts)
    assert (got is not None) == cut
    if got is not None:
        np.testing.assert_array_equal(got, pillow_rgb(data))


def test_the_cut_rows_are_where_the_parts_meet():
    """4:2:0 with a cut: the row both parts write (the lower part's first) is the upper's."""
    data = encoded(1021, 777, "4:2:0", restart_marker_rows=1)
    pieces = jpeg_parts.plan(jpeg_parts.layout(data), 2)
    assert [p.keep_from for p in pieces] == [0, 1]
    assert pieces[0].height == pieces[1].first_row * 16 + 1  # one row past the cut
    np.testing.assert_array_equal(in_parts(data, 2), pillow_rgb(data))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(8, 700), height=st.integers(40, 700), seed=st.integers(0, 2**16),
       quality=st.integers(20, 100), sampling=st.sampled_from(list(SUBSAMPLING)),
       rows=st.booleans(), every=st.integers(1, 6), parts=st.integers(2, 5))
def test_any_cut_is_pillows_image(width, height, seed, quality, sampling, rows, every, parts):
    restart = {"restart_marker_rows": every} if rows else {"restart_marker_blocks": every}
    data = encoded(width, height, sampling, seed, quality, **restart)
    got = in_parts(data, parts)
    if got is not None:
        np.testing.assert_array_equal(got, pillow_rgb(data))


@pytest.mark.parametrize("params", [
    {"progressive": True, "restart_marker_rows": 1},
    {"restart_marker_rows": 0},
])
def test_what_cannot_be_cut_is_declined(params):
    image = Image.fromarray(photo_like(640, 480, 3))
    assert jpeg_parts.layout(save(image, "JPEG", quality=90, **params)) is None
    gray = Image.fromarray(photo_like(640, 480, 3, 1))
    assert jpeg_parts.layout(save(gray, "JPEG", restart_marker_rows=1)) is None


def test_a_broken_marker_sequence_is_declined():
    data = bytearray(encoded(1021, 777, "4:2:0", restart_marker_rows=1))
    lay = jpeg_parts.layout(bytes(data))
    at = int(lay.markers[10])
    data[at + 1] = 0xD0 + (data[at + 1] - 0xD0 + 1) % 8  # a marker out of sequence
    assert jpeg_parts.layout(bytes(data)) is None
    truncated = bytes(encoded(1021, 777, "4:2:0", restart_marker_rows=1)[:-5000])
    assert jpeg_parts.layout(truncated) is None  # the scan never reaches its EOI


def test_a_second_image_after_the_eoi_is_not_the_scans():
    """Phones append previews after the EOI (MPF); only the first scan is cut."""
    data = encoded(1021, 777, "4:2:0", restart_marker_rows=1)
    tail = encoded(160, 120, "4:2:0", restart_marker_rows=1)
    got = in_parts(data + tail, 2)
    np.testing.assert_array_equal(got, pillow_rgb(data + tail))


def test_the_layer_cuts_and_gives_pillows_image(monkeypatch):
    data = encoded(1021, 777, "4:2:0", restart_marker_rows=1)
    calls = []
    real = jpeg_parts.decode_in_parts

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(jpeg_parts, "decode_in_parts", spy)
    monkeypatch.setattr(layer, "pool_size", lambda: 2)
    fast = decode.decode_opened(Image.open(io.BytesIO(data)))
    ref = Image.open(io.BytesIO(data))
    ref.load()
    assert calls == [True]
    assert (fast.mode, fast.size, fast.info) == (ref.mode, ref.size, ref.info)
    assert fast.tobytes() == ref.tobytes()


def test_a_failing_part_hands_over_to_the_whole_decode(monkeypatch):
    data = encoded(1021, 777, "4:2:0", restart_marker_rows=1)
    real = layer.decoder_for("jpeg-parts")
    seen = []

    def refuses_lower_parts(jpeg, out):
        seen.append(out.shape[0])
        if len(seen) > 1:
            raise ValueError("refused")
        return real(jpeg, out)

    monkeypatch.setitem(layer._DECODERS, "jpeg-parts", refuses_lower_parts)
    monkeypatch.setattr(layer, "pool_size", lambda: 2)
    fast = decode.decode_opened(Image.open(io.BytesIO(data)))
    assert len(seen) == 2
    assert fast.tobytes() == Image.open(io.BytesIO(data)).tobytes()


def test_parts_no_worker_starts_run_on_the_calling_thread():
    data = encoded(1021, 777, "4:2:0", restart_marker_rows=1)
    never: list[Future] = []

    def busy_pool(fn, *args):  # a pool whose workers are all taken
        future: Future = Future()
        never.append(future)
        return future

    out = np.zeros((777, 1021, 3), np.uint8)
    call = POOL.submit(jpeg_parts.decode_in_parts, data, out, layer.decoder_for("jpeg-parts"),
                       busy_pool, 3)
    assert call.result(timeout=60), "waited on parts no worker will start"
    assert len(never) == 2 and all(f.cancelled() for f in never)
    np.testing.assert_array_equal(out, pillow_rgb(data))
