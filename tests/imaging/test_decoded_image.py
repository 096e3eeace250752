"""A decoded image behaves as the Pillow image the engine's loader would hold, store or no store.

Reference: Pillow's own ``Image.open(BytesIO(data))`` + ``load()`` of the same bytes. Every
Pillow operation an engine or a processor may run is compared on both; those that need Pillow's
store fill it (and agree after), those that need none leave the decoded array in place.
"""

from __future__ import annotations

import gc
import io
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image, ImageOps

from fixtures import decode_corpus
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode.decoded_image import DecodedImage, held_pixels, held_rgb

pytestmark = pytest.mark.skipif(
    decode.unavailable_reason() is not None,
    reason=f"no verified codec library here: {decode.unavailable_reason()}",
)

FAST = [i for i in decode_corpus.corpus() if i.fast]
MODES = {}
for _item in FAST:
    MODES.setdefault(Image.open(io.BytesIO(_item.data)).mode, _item)


def pillow_loaded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def decoded(data: bytes) -> DecodedImage:
    image = decode.decode_bytes(data)
    assert isinstance(image, DecodedImage) and held_pixels(image) is not None
    return image


@pytest.fixture(params=sorted(MODES), ids=str)
def pair(request):
    data = MODES[request.param].data
    return decoded(data), pillow_loaded(data)


def test_every_held_mode_is_in_the_corpus():
    assert set(MODES) == {"L", "LA", "RGB", "RGBA"}


def test_numpy_reads_the_decoded_array_without_filling_the_store(pair):
    ours, ref = pair
    array = np.asarray(ours)
    assert array.shape == np.asarray(ref).shape and array.dtype == np.uint8
    assert np.array_equal(array, np.asarray(ref))
    assert not array.flags.writeable
    assert np.shares_memory(array, held_pixels(ours))
    assert held_pixels(ours) is not None


def test_an_array_keeps_its_image_alive():
    data = MODES["RGB"].data
    array = np.asarray(decoded(data))
    gc.collect()
    _ = [np.full(array.shape, 7, np.uint8) for _ in range(4)]  # reuse any freed memory
    assert np.array_equal(array, np.asarray(pillow_loaded(data)))


def test_load_copy_convert_exif_transpose_stay_held(pair):
    ours, ref = pair
    access = ours.load()
    assert held_pixels(ours) is not None
    for image in (ours.copy(), ours.convert(ours.mode), ImageOps.exif_transpose(ours)):
        assert held_pixels(image) is not None
        assert image == ref.copy()
        assert image.format is None  # as Pillow's copy
    assert ours.format == ref.format
    assert access[1, 2] == ref.load()[1, 2]  # the access fills the store on first use
    assert held_pixels(ours) is None
    assert ours.tobytes() == ref.tobytes()


@pytest.mark.parametrize("operation", [
    lambda im: im.resize((17, 9), Image.Resampling.BICUBIC),
    lambda im: im.crop((1, 2, 9, 7)),
    lambda im: im.transpose(Image.Transpose.ROTATE_90),
    lambda im: im.convert("L"),
    lambda im: im.convert("RGBA"),
    lambda im: im.getpixel((3, 4)),
    lambda im: [band.tobytes() for band in im.split()],
    lambda im: im.histogram(),
    lambda im: im.getbbox(),
    lambda im: im.tobytes("raw", im.mode, 0, -1),
    lambda im: pickle.loads(pickle.dumps(im)),
    lambda im: _saved(im, "PNG"),
], ids=["resize", "crop", "transpose", "to-L", "to-RGBA", "getpixel", "split", "histogram",
        "getbbox", "bottom-up-bytes", "pickle", "save-png"])
def test_operations_that_need_the_store_match_pillow(pair, operation):
    ours, ref = pair
    got, want = operation(ours), operation(ref)
    if isinstance(want, Image.Image):
        assert (got.mode, got.size, got.tobytes()) == (want.mode, want.size, want.tobytes())
    else:
        assert got == want


def _saved(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


def test_writes_go_to_pillows_store_and_later_reads_see_them(pair):
    ours, ref = pair
    before = np.asarray(ours)
    white = (255,) * len(ours.getbands()) if ours.mode != "L" else 255
    for image in (ours, ref):
        image.putpixel((0, 0), white)
        image.paste(white, (2, 2, 5, 4))
    assert held_pixels(ours) is None
    assert ours.tobytes() == ref.tobytes()
    assert np.array_equal(np.asarray(ours), np.asarray(ref))
    assert not np.array_equal(before, np.asarray(ours))  # an earlier read is a snapshot


def test_equality_is_by_content_against_plain_images(pair):
    ours, ref = pair
    assert ours == ref.copy() and ref.copy() == ours
    other = ref.copy()
    other.putpixel((0, 0), (7,) * len(other.getbands()) if other.mode != "L" else 7)
    assert ours != other and other != ours
    assert ours != ref  # Pillow's own rule: a JpegImageFile is not of a plain image's class


def test_closed_image_raises_as_pillow():
    ours, ref = decoded(FAST[0].data), pillow_loaded(FAST[0].data)
    ours.close()
    ref.close()
    assert held_pixels(ours) is None
    for image in (ours, ref):
        with pytest.raises(ValueError, match="Operation on closed image"):
            image.tobytes()


def test_threads_filling_one_image_agree():
    data = MODES["RGB"].data
    ref = pillow_loaded(data).tobytes()
    for _ in range(5):
        ours = decoded(data)
        with ThreadPoolExecutor(8) as pool:
            # Pillow's own tobytes reads the store: every thread asks for it to be filled
            got = list(pool.map(Image.Image.tobytes, [ours] * 16))
        assert set(got) == {ref}
        assert held_pixels(ours) is None


def test_each_decode_hands_off_its_own_array():
    data = MODES["RGB"].data
    first, second = decoded(data), decoded(data)
    assert not np.shares_memory(held_pixels(first), held_pixels(second))


def test_held_rgb_is_for_rgb_only():
    assert held_rgb(decoded(MODES["RGB"].data)) is not None
    assert held_rgb(decoded(MODES["RGBA"].data)) is None
    assert held_rgb(pillow_loaded(MODES["RGB"].data)) is None
    assert held_rgb(np.zeros((2, 2, 3), np.uint8)) is None
