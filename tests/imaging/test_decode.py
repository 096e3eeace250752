"""The exact decode layer against Pillow itself: same image (mode, size, info, pixels) or Pillow.

Reference: ``Image.open(BytesIO(data))`` then ``load()`` in this process (Pillow 13.0.0, the
pinned release). Every corpus item must come back identical, and taken by the fast path
exactly where the rule table says it is.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image, ImageOps

from fixtures import decode_corpus
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import codecs, layer, verified

pytestmark = pytest.mark.skipif(
    decode.unavailable_reason() is not None,
    reason=f"no verified codec library here: {decode.unavailable_reason()}",
)

CORPUS = decode_corpus.corpus()


def pillow_loaded(data: bytes, formats=None) -> Image.Image:
    image = Image.open(io.BytesIO(data), formats=formats)
    image.load()
    return image


def assert_same_image(ours: Image.Image, ref: Image.Image) -> None:
    assert (ours.mode, ours.size) == (ref.mode, ref.size)
    assert ours.info == ref.info
    assert ours.tobytes() == ref.tobytes()


@pytest.mark.parametrize("item", CORPUS, ids=lambda i: i.name)
def test_corpus_is_pillows_image(item):
    ref = pillow_loaded(item.data)
    fast = decode.decode_opened(Image.open(io.BytesIO(item.data)))
    assert (fast is not None) == item.fast, "fast path taken where the rule table says"
    assert_same_image(decode.decode_bytes(item.data), ref)
    if fast is not None:
        assert_same_image(fast, ref)
        assert fast.format == ref.format
        # the same bytes once Pillow's own store is filled (what other consumers read)
        assert Image.Image.tobytes(fast) == ref.tobytes()


@pytest.mark.parametrize("item", [i for i in CORPUS if i.fast], ids=lambda i: i.name)
def test_engine_steps_after_decoding_match(item):
    """EXIF transpose and the RGB conversion with a background, on ours and on Pillow's."""

    def finish(image: Image.Image) -> Image.Image:
        image = ImageOps.exif_transpose(image)
        if image.mode in ("RGBA", "LA") or "transparency" in image.info:
            rgba = image.convert("RGBA")
            out = Image.new("RGB", rgba.size, (12, 34, 56))
            out.paste(rgba, mask=rgba.split()[3])
            return out
        return image.convert("RGB")

    ref = finish(pillow_loaded(item.data))
    ours = finish(decode.decode_bytes(item.data))
    assert_same_image(ours, ref)


def test_exif_orientations_all_differ_and_match():
    """The eight orientations give eight different pictures, each as Pillow's."""
    seen = set()
    for item in decode_corpus.jpeg_items():
        if "orientation" not in item.name:
            continue
        ours = ImageOps.exif_transpose(decode.decode_bytes(item.data))
        ref = ImageOps.exif_transpose(pillow_loaded(item.data))
        assert_same_image(ours, ref)
        seen.add((ours.size, ours.tobytes()))
    assert len(seen) == 8


def test_threads_decode_the_same():
    items = [i for i in CORPUS if i.fast][:12] * 4
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: decode.decode_bytes(i.data).tobytes(), items))
    assert results == [pillow_loaded(i.data).tobytes() for i in items]


def test_loaded_or_file_backed_images_are_left_to_pillow(tmp_path):
    data = decode_corpus.jpeg_items()[0].data
    loaded = Image.open(io.BytesIO(data))
    loaded.load()
    assert decode.decode_opened(loaded) is None
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    with Image.open(path) as on_disk:
        assert decode.decode_opened(on_disk) is None
    assert decode.decode_opened(Image.new("RGB", (4, 4))) is None
    assert decode.decode_opened("not an image") is None


def test_switch_off_means_pillow(monkeypatch):
    monkeypatch.setenv(decode.ENV_SWITCH, "0")
    data = decode_corpus.jpeg_items()[0].data
    assert decode.decode_opened(Image.open(io.BytesIO(data))) is None
    assert decode.unavailable_reason() == f"{decode.ENV_SWITCH}=0"


def test_by_default_only_rows_measured_faster_are_used(monkeypatch):
    monkeypatch.setenv(decode.ENV_SWITCH, "1")
    jpeg, png, webp = (items()[0].data for items in (
        decode_corpus.jpeg_items, decode_corpus.png_items, decode_corpus.webp_items))
    assert set(decode.available()) == set(codecs.ADAPTERS)  # every row measured faster
    slower = tuple(replace(rule, faster=False) if rule.variant.startswith("jpeg") else rule
                   for rule in verified.RULES)
    monkeypatch.setattr(verified, "RULES", slower)
    monkeypatch.setattr(layer, "_DECODERS", {})
    assert decode.decode_opened(Image.open(io.BytesIO(jpeg))) is None  # exact, not faster
    assert decode.decode_opened(Image.open(io.BytesIO(png))) is not None
    assert decode.decode_opened(Image.open(io.BytesIO(webp))) is not None
    assert set(decode.available()) == {"png-8bit", "png-deflate", "webp-still"}
    monkeypatch.setenv(decode.ENV_SWITCH, "all")
    assert decode.decode_opened(Image.open(io.BytesIO(jpeg))) is not None


def test_missing_or_unverified_library_means_pillow(monkeypatch):
    data = decode_corpus.jpeg_items()[0].data
    for version in (None, "0.0.1"):
        monkeypatch.setattr(layer, "_DECODERS", {})
        monkeypatch.setattr(codecs, "installed", lambda dist, v=version: v)
        assert decode.decode_opened(Image.open(io.BytesIO(data))) is None
        assert decode.available() == {}
        reason = decode.unavailable_reason()
        assert reason and "no verified codec library" in reason
        assert_same_image(decode.decode_bytes(data), pillow_loaded(data))


def test_a_refusing_library_hands_back_to_pillow(monkeypatch):
    def broken(data: bytes, out: np.ndarray) -> np.ndarray:
        raise RuntimeError("codec refused")

    monkeypatch.setattr(layer, "_DECODERS", dict.fromkeys(codecs.ADAPTERS, broken))
    data = decode_corpus.png_items()[0].data
    assert decode.decode_opened(Image.open(io.BytesIO(data))) is None
    assert_same_image(decode.decode_bytes(data), pillow_loaded(data))


def test_a_wrong_shape_from_the_library_hands_back_to_pillow(monkeypatch):
    monkeypatch.setattr(layer, "_DECODERS", dict.fromkeys(
        codecs.ADAPTERS, lambda data, out: np.zeros((3, 3, 3), np.uint8)))
    data = decode_corpus.webp_items()[0].data
    assert decode.decode_opened(Image.open(io.BytesIO(data))) is None
    # an array of the right size that is not the one it was asked to fill
    monkeypatch.setattr(layer, "_DECODERS", dict.fromkeys(
        codecs.ADAPTERS, lambda data, out: np.zeros_like(out)))
    assert decode.decode_opened(Image.open(io.BytesIO(data))) is None


def test_probe_agrees_here():
    assert decode.probe_mismatch(Image.open) is None


def test_probe_catches_a_wrong_decoder(monkeypatch):
    real = layer.decoder_for("jpeg-ycbcr")

    def off_by_one(data: bytes, out: np.ndarray) -> np.ndarray:
        real(data, out)
        out ^= np.uint8(1)
        return out

    monkeypatch.setitem(layer._DECODERS, "jpeg-ycbcr", off_by_one)
    assert decode.probe_mismatch(Image.open).startswith("behaviour: the fast JPEG RGB")


def test_recycled_memory_is_never_shared_with_a_held_image(monkeypatch):
    """Large decodes reuse freed memory (output pool), but never memory an image still holds."""
    import gc

    from vlm_fastpath.imaging import output_pool
    from vlm_fastpath.imaging.decode.decoded_image import held_pixels

    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "256")
    monkeypatch.setattr(output_pool, "POOL", output_pool.OutputPool())
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (1100, 1400, 3), np.uint8)  # 4.6 MB: pooled
    datas = []
    for quality in (70, 90):
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=quality)
        datas.append(buf.getvalue())
    refs = [pillow_loaded(d).tobytes() for d in datas]

    def address(image: Image.Image) -> int:
        held = held_pixels(image)
        assert held is not None, "the fast path decoded it"
        return held.__array_interface__["data"][0]

    first = decode.decode_bytes(datas[0])
    view = np.asarray(first)[100:]  # a consumer's view keeps the memory too
    second = decode.decode_bytes(datas[1])
    assert address(first) != address(second)
    kept = address(first)
    del first
    gc.collect()
    third = decode.decode_bytes(datas[1])
    assert address(third) != kept, "reused memory a numpy view still holds"
    assert view.tobytes() == refs[0][100 * 1400 * 3:]
    del view
    gc.collect()
    fourth = decode.decode_bytes(datas[1])
    assert address(fourth) == kept and output_pool.POOL.reused >= 1, "freed memory recycled"
    for image, ref in ((second, refs[1]), (third, refs[1]), (fourth, refs[1])):
        assert image.tobytes() == ref
