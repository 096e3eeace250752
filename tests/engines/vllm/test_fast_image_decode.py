"""``vllm-fast-image-decode``: vLLM's ``ImageMediaIO`` with and without the patch, same answer.

The engine's own ``load_bytes``/``load_base64`` (open_image, pixel limit, EXIF transpose,
load, ``convert_image_mode`` with its background) is the reference: the loaded image (mode,
size, info, pixels), ``original_bytes`` and ``io_config`` (what the cache hashes) must be
equal; bad input must raise the same exception type with the same message.
"""

from __future__ import annotations

import base64
import io
import re

import pytest
from packaging.version import Version
from PIL import Image

import vlm_fastpath
from fixtures import bad_images, decode_corpus
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import layer
from vlm_fastpath.imaging.decode.decoded_image import held_rgb

vllm = pytest.importorskip("vllm")
if Version(Version(vllm.__version__).public) < Version("0.24"):
    pytest.skip("vllm-fast-image-decode applies from vLLM 0.24 (load_bytes calls normalize_image "
                "on the opened image; the patch's status there: test_fresh_process)",
                allow_module_level=True)

NAME = "vllm-fast-image-decode"
CORPUS = decode_corpus.corpus()
ADDRESS = re.compile(r"0x[0-9a-f]+")
FAST = decode.unavailable_reason() is None


def _status() -> dict:
    return next(r for r in vlm_fastpath.status("vllm") if r["name"] == NAME)


def _io(**kwargs):
    from vllm.multimodal.media.image import ImageMediaIO

    return ImageMediaIO(**kwargs)


@pytest.fixture(autouse=True)
def _every_verified_decoder(monkeypatch):
    """Identity for every verified row, also any marked not faster (unless the run turned
    fast decoding off, to see the patch stand aside)."""
    if FAST:
        monkeypatch.setenv(decode.ENV_SWITCH, "all")


def outcome(call):
    try:
        loaded = call()
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        cause = exc.__cause__
        return ("raised", type(exc), ADDRESS.sub("0x?", str(exc)),
                type(cause) if cause is not None else None)
    image = loaded.media
    # io_config: what the cache hashes besides the bytes (vLLM 0.25+; absent before)
    return ("loaded", type(loaded), image.mode, image.size, image.info, image.tobytes(),
            loaded.original_bytes, getattr(loaded, "io_config", None))


def both(call):
    """(without this patch, with it) for the same call; every other patch stays as it is."""
    vlm_fastpath.revert("vllm", [NAME])
    theirs = outcome(call)
    vlm_fastpath.apply("vllm", [NAME])
    return theirs, outcome(call)


@pytest.fixture
def fast_calls(monkeypatch):
    """The bytes the fast decoders were given (the patch must really take the fast path)."""
    calls = []
    for variant in list(layer.codecs.ADAPTERS):
        real = layer.decoder_for(variant)
        if real is None:
            continue

        def counted(data, out, real=real):
            calls.append(data)
            return real(data, out)

        monkeypatch.setitem(layer._DECODERS, variant, counted)
    return calls


def test_status():
    row = _status()
    if FAST:
        assert row["status"] == "applied", row
    else:
        assert row["status"] == "stood-aside", row
        assert "dependency: " in row["reason"], row  # no library, or the switch off


needs_fast = pytest.mark.skipif(not FAST, reason=f"{decode.unavailable_reason()}")


@needs_fast
@pytest.mark.parametrize("item", CORPUS, ids=lambda i: i.name)
def test_load_bytes_is_the_releases(item, fast_calls):
    theirs, ours = both(lambda: _io().load_bytes(item.data))
    assert ours == theirs
    assert (item.data in fast_calls) == item.fast


@needs_fast
@pytest.mark.parametrize("item", [i for i in CORPUS if i.fast], ids=lambda i: i.name)
def test_rgb_images_reach_the_processor_as_the_decoders_array(item):
    """The hand-off survives vLLM's steps (EXIF transpose's copy, load(), the mode check):
    an RGB image arrives with Pillow's store unfilled, its pixels the decoder's array."""
    vlm_fastpath.apply("vllm", [NAME])
    image = _io().load_bytes(item.data).media
    opened = Image.open(io.BytesIO(item.data))
    turned = opened.getexif().get(0x0112, 1) != 1  # EXIF transpose makes Pillow's own image
    if opened.mode == "RGB" and "transparency" not in opened.info and not turned:
        assert held_rgb(image) is not None
        assert image.tobytes() == Image.Image.tobytes(image)  # equal once the store is filled


@needs_fast
@pytest.mark.parametrize("item", [i for i in CORPUS if i.fast], ids=lambda i: i.name)
def test_background_colour_and_no_conversion(item):
    for kwargs in ({"rgba_background_color": (10, 200, 30)}, {"image_mode": None},
                   {"image_mode": "L"}):
        theirs, ours = both(lambda kw=kwargs: _io(**kw).load_bytes(item.data))
        assert ours == theirs, kwargs


@needs_fast
def test_load_base64_is_the_releases(fast_calls):
    item = CORPUS[0]
    text = base64.b64encode(item.data).decode()
    theirs, ours = both(lambda: _io().load_base64("image/jpeg", text))
    assert ours == theirs and item.data in fast_calls


def _bad_inputs() -> dict[str, bytes]:
    jpeg = decode_corpus.jpeg_items()[0].data
    png = decode_corpus.png_items()[0].data
    webp = decode_corpus.webp_items()[2].data
    cases = {"empty": b"", "garbage": bad_images.garbage(), "bomb": bad_images.bomb_png()}
    for name, data in (("jpeg", jpeg), ("png", png), ("webp", webp)):
        for keep in (0.05, 0.5, 0.97):
            cases[f"{name}-truncated-{keep}"] = data[: int(len(data) * keep)]
        mid = len(data) // 2
        cases[f"{name}-corrupt"] = data[:mid] + b"\x00" * 9 + data[mid + 9:]
    cases["tiff-outside-allowlist"] = decode_corpus.save(Image.new("RGB", (8, 8)), "TIFF")
    return cases


BAD = _bad_inputs()


@needs_fast
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_the_releases(name):
    theirs, ours = both(lambda: _io().load_bytes(BAD[name]))
    assert ours == theirs


@needs_fast
@pytest.mark.parametrize("name", ["jpeg-420", "png-rgba", "webp-lossless-alpha"])
def test_vllm_pixel_limit_is_the_releases(name, monkeypatch):
    import vllm.envs as envs

    data = next(i.data for i in CORPUS if i.name == name)
    monkeypatch.setattr(envs, "VLLM_MAX_IMAGE_PIXELS", 100, raising=False)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "100")
    theirs, ours = both(lambda: _io().load_bytes(data))
    assert ours == theirs
    if theirs[0] != "raised":  # the limit arrived after 0.24: both loaded, equal
        pytest.skip("this vLLM has no VLLM_MAX_IMAGE_PIXELS")


@needs_fast
def test_pillow_max_image_pixels_is_the_releases(monkeypatch):
    data = decode_corpus.jpeg_items()[0].data
    w, h = Image.open(__import__("io").BytesIO(data)).size
    for limit in (w * h // 3, int(w * h * 0.8)):  # error band, warning band
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        theirs, ours = both(lambda: _io().load_bytes(data))
        assert ours == theirs


@needs_fast
def test_a_fault_falls_back_to_the_release(monkeypatch):
    def broken(image):
        raise KeyError("bug in the fast path")

    monkeypatch.setattr(layer, "decode_opened", broken)
    data = decode_corpus.png_items()[1].data
    theirs, ours = both(lambda: _io().load_bytes(data))
    assert ours == theirs


def test_revert_restores_the_original():
    import vllm.multimodal.media.image as media

    vlm_fastpath.revert("vllm")
    original = media.normalize_image
    vlm_fastpath.apply("vllm")
    assert (media.normalize_image is not original) == FAST
    vlm_fastpath.apply("vllm")  # idempotent
    assert getattr(media.normalize_image, "__vlm_fastpath_original__", original) is original
    vlm_fastpath.revert("vllm")
    assert media.normalize_image is original
