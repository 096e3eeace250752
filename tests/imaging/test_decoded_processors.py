"""From bytes to pixel_values: an image ``imaging.decode`` decoded gives the pixel_values of the
image Pillow loads from the same bytes, for Kimi and Qwen, and the processors read the
decoder's own array (Pillow's store stays unfilled: no copy into its 4-byte layout).

References: the Kimi oracle (``fixtures.reference_kimi``) and transformers' Qwen2-VL
processors, each run on Pillow's own loaded image of the same bytes.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from fixtures import decode_corpus
from fixtures.reference_kimi import KIMI_K25_CFG
from tests.kimi_integration.helpers import assert_parity, img
from tests.qwen_integration.helpers import CONFIGS, assert_same, hf_classes, hf_kwargs
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode.decoded_image import held_rgb
from vlm_fastpath.kimi_integration import FusedKimiProcessor
from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

pytestmark = pytest.mark.skipif(
    decode.unavailable_reason() is not None,
    reason=f"no verified codec library here: {decode.unavailable_reason()}",
)

UINT8 = {"do_rescale": False, "do_normalize": False}


def _items() -> list[decode_corpus.CorpusItem]:
    """RGB items the fast path takes: the corpus, the photographs, and larger odd-sized
    photo-like images of each format (resized on both axes by both models)."""
    items = [i for i in decode_corpus.corpus()
             if i.fast and Image.open(io.BytesIO(i.data)).mode == "RGB"]
    big = Image.fromarray(decode_corpus.photo_like(1203, 917, seed=30))
    for fmt, params in (("JPEG", {"quality": 90}), ("PNG", {}), ("WEBP", {"quality": 80})):
        items.append(decode_corpus.CorpusItem(
            f"{fmt.lower()}-1203x917", decode_corpus.save(big, fmt, **params), True))
    return items


ITEMS = _items()


def _both(data: bytes) -> tuple[Image.Image, Image.Image]:
    ours = decode.decode_bytes(data)
    ref = Image.open(io.BytesIO(data))
    ref.load()
    assert held_rgb(ours) is not None
    return ours, ref


@pytest.fixture(scope="module")
def kimi() -> FusedKimiProcessor:
    return FusedKimiProcessor(KIMI_K25_CFG)


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.name)
def test_kimi_from_decoded_bytes(kimi, item, uint8):
    ours, ref = _both(item.data)
    assert_parity(kimi, [img(ours)], KIMI_K25_CFG, oracle_medias=[img(ref)], uint8=uint8)
    assert held_rgb(ours) is not None, "the processor read the decoded array"


@pytest.fixture(scope="module")
def qwen_pairs():
    classes = hf_classes()
    pairs = {}
    for mode, cls in classes.items():
        hf = cls(**hf_kwargs(CONFIGS["qwen2.5-vl"]))
        pairs[mode] = (hf, FastQwen2VLImageProcessor.from_hf(hf))
    return pairs


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
@pytest.mark.parametrize("mode", ["torchvision", "pil"])
@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.name)
def test_qwen_from_decoded_bytes(qwen_pairs, item, mode, uint8):
    hf, fast = qwen_pairs[mode]
    ours, ref = _both(item.data)
    extra = UINT8 if uint8 else {}
    expected = hf(images=[ref], return_tensors="pt", **extra)
    got = fast(images=[ours], return_tensors="pt", **extra)
    assert_same(expected, got)
    if mode == "torchvision":
        assert held_rgb(ours) is not None, "the processor read the decoded array"


def test_a_batch_of_decoded_and_pillow_images(kimi, qwen_pairs):
    pairs = [_both(item.data) for item in ITEMS[::3]]
    ours = [o for o, _ in pairs]
    refs = [r for _, r in pairs]
    mixed = [o if k % 2 else r for k, (o, r) in enumerate(pairs)]
    for batch in (ours, mixed):
        assert_parity(kimi, [img(i) for i in batch], KIMI_K25_CFG,
                      oracle_medias=[img(i) for i in refs])
        hf, fast = qwen_pairs["torchvision"]
        assert_same(hf(images=refs, return_tensors="pt"), fast(images=batch, return_tensors="pt"))
