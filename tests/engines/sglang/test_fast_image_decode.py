"""``sglang-fast-image-decode``: SGLang's CPU image loading with and without it, same answer.

References are the release's own functions: ``load_image`` (what the processors call) and
``BaseMultimodalProcessor._load_single_item`` (load, then ``convert("RGB")`` or
``smart_to_rgb``). The image (mode, size, info, pixels, format) must be equal, and bad input
must raise the same exception type with the same message. (The loaded object is a plain
``PIL.Image.Image`` where SGLang's is Pillow's ``ImageFile`` subclass; no caller of the
loader reads anything but the image API.)
"""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from fixtures import bad_images, decode_corpus
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import layer
from vlm_fastpath.patches import REGISTRY

sglang = pytest.importorskip("sglang")
if Version(Version(sglang.__version__).public) < Version("0.5.19"):
    pytest.skip("sglang-fast-image-decode applies from SGLang 0.5.19 (_load_image opens with "
                "Pillow, then _fully_load_pil_image; its status there: conftest.EXPECTED)",
                allow_module_level=True)

NAME = "sglang-fast-image-decode"
CORPUS = decode_corpus.corpus()
ADDRESS = re.compile(r"0x[0-9a-f]+")
FAST = decode.unavailable_reason() is None
needs_fast = pytest.mark.skipif(not FAST, reason=f"{decode.unavailable_reason()}")


@pytest.fixture
def loaders(engine):
    from sglang.srt.multimodal.processors.base_processor import BaseMultimodalProcessor
    from sglang.srt.utils import common

    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    yield common, BaseMultimodalProcessor
    REGISTRY.revert(engine="sglang")


@pytest.fixture(autouse=True)
def _every_verified_decoder(monkeypatch):
    """Identity for every verified row, also any marked not faster (unless the run turned
    fast decoding off, to see the patch stand aside)."""
    if FAST:
        monkeypatch.setenv(decode.ENV_SWITCH, "all")


def outcome(call):
    try:
        image = call()
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return ("raised", type(exc), ADDRESS.sub("0x?", str(exc)))
    if isinstance(image, tuple):
        image = image[0]
    return ("loaded", image.mode, image.size, image.info, image.format, image.tobytes())


def both(call):
    REGISTRY.revert(engine="sglang", patches=[NAME])
    theirs = outcome(call)
    REGISTRY.apply(engine="sglang", patches=[NAME])
    return theirs, outcome(call)


@pytest.fixture
def fast_calls(monkeypatch):
    calls = []
    for variant in list(layer.codecs.ADAPTERS):
        real = layer.decoder_for(variant)
        if real is not None:
            monkeypatch.setitem(layer._DECODERS, variant,
                                lambda data, out, real=real: calls.append(data) or real(data, out))
    return calls


def test_status(loaders):
    row = next(r for r in REGISTRY.status("sglang") if r.name == NAME)
    if FAST:
        assert row.status.value == "applied", row.as_dict()
    else:
        assert row.status.value == "stood-aside", row.as_dict()
        assert "dependency: " in row.reason  # no library, or the switch off


@needs_fast
@pytest.mark.parametrize("item", CORPUS, ids=lambda i: i.name)
def test_load_image_is_the_releases(item, loaders, fast_calls):
    common, _ = loaders
    theirs, ours = both(lambda: common.load_image(item.data, False))
    assert ours == theirs
    assert (item.data in fast_calls) == item.fast


@needs_fast
@pytest.mark.parametrize("smart", [False, True])
@pytest.mark.parametrize("item", [i for i in CORPUS if i.fast], ids=lambda i: i.name)
def test_load_single_item_is_the_releases(item, smart, loaders, monkeypatch):
    from sglang.srt.managers.schedule_batch import Modality

    _, base = loaders
    monkeypatch.setattr(base, "smart_rgb_conversion", smart)
    monkeypatch.setattr(base, "gpu_image_decode", False)
    theirs, ours = both(lambda: base._load_single_item(item.data, Modality.IMAGE))
    assert ours == theirs


def _bad_inputs() -> dict[str, bytes]:
    cases = {"empty": b"", "garbage": bad_images.garbage(), "bomb": bad_images.bomb_png()}
    for item in (decode_corpus.jpeg_items()[0], decode_corpus.png_items()[1],
                 decode_corpus.webp_items()[3]):
        data = item.data
        for keep in (0.05, 0.5, 0.97):
            cases[f"{item.name}-truncated-{keep}"] = data[: int(len(data) * keep)]
        mid = len(data) // 2
        cases[f"{item.name}-corrupt"] = data[:mid] + b"\xff" * 9 + data[mid + 9:]
    return cases


BAD = _bad_inputs()


@needs_fast
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_the_releases(name, loaders):
    from sglang.srt.managers.schedule_batch import Modality

    common, base = loaders
    theirs, ours = both(lambda: common.load_image(BAD[name], False))
    assert ours == theirs
    theirs, ours = both(lambda: base._load_single_item(BAD[name], Modality.IMAGE))
    assert ours == theirs


@needs_fast
def test_a_fault_falls_back_to_the_release(loaders, monkeypatch):
    common, _ = loaders

    def broken(image):
        raise KeyError("bug in the fast path")

    monkeypatch.setattr(layer, "decode_opened", broken)
    data = decode_corpus.jpeg_items()[0].data
    theirs, ours = both(lambda: common.load_image(data, False))
    assert ours == theirs


def test_revert_restores_the_original(loaders):
    common, _ = loaders
    REGISTRY.revert(engine="sglang")
    original = common._fully_load_pil_image
    REGISTRY.apply(engine="sglang")
    assert (common._fully_load_pil_image is not original) == FAST
    REGISTRY.revert(engine="sglang")
    assert common._fully_load_pil_image is original
