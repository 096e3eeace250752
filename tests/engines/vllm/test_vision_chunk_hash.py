"""``vllm-vision-chunk-hash-bytes``: a Kimi (vision-chunk) image is keyed by its file's bytes,
by vLLM's own rule for images, and the processor still gets the same image.

The door: each file goes through the release's own loader (``ImageMediaIO.load_bytes``), the
chat renderer's own materialization of a request's items (``_resolve_items``, which resolves
vision chunks through ``_resolve_vision_chunk_items``), then the release's own hashing
(``hash_kwargs`` as the release calls it; on 0.22+ ``ProcessorInputs.get_mm_hashes`` on the
items the release's parser makes: the key of the processor cache and the identifier prefix
caching hashes). The reference key is vLLM's own for the same ``MediaWithBytes`` left wrapped
(as it keys every other model's images), computed with the patch reverted.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import numpy as np
import pytest
from PIL import Image

import vlm_fastpath
from fixtures.decode_corpus import photo_like, save
from fixtures.vllm_requests import mm_digest
from vlm_fastpath.patches.adapters import encoded_source
from vlm_fastpath.patches.vllm.vision_chunk_hash import renderers_chat_utils as patch_module

vllm = pytest.importorskip("vllm")
home = importlib.import_module(patch_module.resolution_home())  # the import applies the patch

NAME = patch_module.PATCH
MODEL = "org/kimi"


def _files() -> dict[str, bytes]:
    rgb = Image.fromarray(photo_like(333, 217, 1))
    rgba = Image.fromarray(photo_like(101, 77, 2, channels=4), "RGBA")
    gray = Image.fromarray(photo_like(64, 49, 3, channels=1), "L")
    return {
        "jpeg": save(rgb, "JPEG", quality=90),
        "png-rgba": save(rgba, "PNG"),  # composited on white by the loader
        "png-gray": save(gray, "PNG"),
        "png-palette": save(rgb.convert("P"), "PNG"),
        "webp": save(rgb, "WEBP", quality=80),
    }


FILES = _files()


def load(data: bytes, **io_kwargs):
    """The release's own loader: a ``MediaWithBytes`` of the decoded image."""
    from vllm.multimodal.media.image import ImageMediaIO

    return ImageMediaIO(**io_kwargs).load_bytes(data)


def resolve(*wrappers) -> list:
    """The chunks the release's chat renderer materializes for a request of image items
    (``_resolve_items``, which calls the resolution by its module global)."""
    mm_data, _ = home._resolve_items(
        {"vision_chunk": [(w, None) for w in wrappers]},
        object(),  # the model's processor: only a video chunk would use it
        {"vision_chunk": ["image"] * len(wrappers)},
    )
    return mm_data["vision_chunk"]


def key(chunk, monkeypatch) -> str:
    return mm_digest("blake3", monkeypatch, model_id=MODEL, vision_chunk=chunk)


def wrapped(wrapper) -> dict:
    """The chunk vLLM would hash had it kept the wrapper (its rule for other models' images)."""
    return {"type": "image", "image": wrapper, "uuid": None}


def _status() -> dict:
    return next(r for r in vlm_fastpath.status("vllm") if r["name"] == NAME)


def test_status():
    assert _status()["status"] == "applied", _status()


@pytest.mark.parametrize("name", sorted(FILES))
def test_key_is_vllms_key_for_the_file(name, monkeypatch):
    wrapper = load(FILES[name])
    chunk = resolve(wrapper)[0]
    assert chunk["image"] is wrapper.media  # the processor gets the image it got before
    ours = key(chunk, monkeypatch)
    vlm_fastpath.revert("vllm", [NAME])
    try:
        reference = key(wrapped(wrapper), monkeypatch)
        by_pixels = key(resolve(load(FILES[name]))[0], monkeypatch)
    finally:
        vlm_fastpath.apply("vllm")
    assert ours == reference
    assert ours != by_pixels  # without the patch vLLM hashes this image's pixels


def test_hashing_reads_the_file_not_the_pixels():
    from vllm.multimodal.hasher import MultiModalHasher

    data = FILES["jpeg"]
    chunk = resolve(load(data))[0]
    fed = sum(memoryview(c).nbytes for c in MultiModalHasher.iter_item_to_bytes("x", chunk))
    pixels = chunk["image"].width * chunk["image"].height * 3
    assert len(data) <= fed < len(data) + 4096 < pixels


def test_same_file_same_key_other_file_or_setting_other_key(monkeypatch):
    jpeg = FILES["jpeg"]
    first, second = resolve(load(jpeg), load(jpeg))
    assert first["image"] is not second["image"]
    assert key(first, monkeypatch) == key(second, monkeypatch)
    # the same pixels in another file: another key, as vLLM keys images by their file
    pixels = np.asarray(first["image"])
    again = save(Image.fromarray(pixels), "PNG")
    other = save(Image.fromarray(pixels), "PNG", compress_level=1)
    assert key(resolve(load(again))[0], monkeypatch) != key(resolve(load(other))[0], monkeypatch)
    # a decode setting that changes the image (io_config, 0.25+) changes the key too
    converted = load(jpeg, image_mode="RGBA")
    if getattr(converted, "io_config", None):
        assert key(resolve(converted)[0], monkeypatch) != key(first, monkeypatch)


def test_images_without_a_file_and_videos_are_vllms(monkeypatch):
    """A PIL image given directly (the offline API) has no file: hashed by its pixels, as
    before; the patch records nothing on it."""
    image = Image.fromarray(photo_like(50, 40, 4))
    chunk = {"type": "image", "image": image, "uuid": None}
    ours = key(chunk, monkeypatch)
    assert encoded_source.recorded(image) is None
    vlm_fastpath.revert("vllm", [NAME])
    try:
        assert key(chunk, monkeypatch) == ours
    finally:
        vlm_fastpath.apply("vllm")


def test_the_record_stays_on_the_image_object():
    """A copy or an unpickled image (which may be changed) carries no record."""
    import pickle

    image = resolve(load(FILES["jpeg"]))[0]["image"]
    assert encoded_source.recorded(image) is not None
    assert encoded_source.recorded(image.copy()) is None
    assert encoded_source.recorded(pickle.loads(pickle.dumps(image))) is None


def _processor_cache_keys(chunks) -> list[str]:
    """``ProcessorInputs.get_mm_hashes`` on the items the release's parser makes (0.22+)."""
    inputs_module = pytest.importorskip("vllm.multimodal.processing.inputs")
    from vllm.multimodal.parse import MultiModalDataParser

    items = MultiModalDataParser().parse_mm_data({"vision_chunk": chunks})
    inputs = inputs_module.ProcessorInputs(prompt=[1, 2, 3], mm_data_items=items)
    params = inspect.signature(inputs.get_mm_hashes).parameters
    args = (MODEL, "blake3") if "hash_algorithm" in params else (MODEL,)
    return inputs.get_mm_hashes(*args)["vision_chunk"]


def test_processor_cache_and_prefix_keys_repeat_for_a_repeated_file(monkeypatch):
    """Two requests with the same file get the same processor-cache key (a cache hit) and the
    same identifier for prefix caching; another file another key."""
    monkeypatch.setenv("VLLM_MM_HASHER_ALGORITHM", "blake3")
    one = _processor_cache_keys(resolve(load(FILES["jpeg"]), load(FILES["webp"])))
    two = _processor_cache_keys(resolve(load(FILES["jpeg"]), load(FILES["webp"])))
    assert one == two and one[0] != one[1]
    wrapper = load(FILES["jpeg"])
    vlm_fastpath.revert("vllm", [NAME])
    try:
        reference = mm_digest("blake3", monkeypatch, model_id=MODEL,
                              vision_chunk=wrapped(wrapper))
    finally:
        vlm_fastpath.apply("vllm")
    assert one[0] == reference


def test_a_fault_falls_back_to_vllms_hash(monkeypatch):
    chunk = resolve(load(FILES["jpeg"]))[0]
    vlm_fastpath.revert("vllm", [NAME])
    try:
        by_pixels = key(chunk, monkeypatch)
    finally:
        vlm_fastpath.apply("vllm")

    def broken(image):
        raise RuntimeError("injected")

    monkeypatch.setattr(encoded_source, "rewrap", broken)
    assert key(chunk, monkeypatch) == by_pixels


def test_contract_stands_aside_where_vllm_hashes_a_wrapper_by_pixels(monkeypatch):
    from vllm.multimodal.hasher import MultiModalHasher

    vlm_fastpath.revert("vllm", [NAME])
    original = MultiModalHasher.__dict__["serialize_item"].__func__

    def by_pixels(cls, obj):
        media = getattr(obj, "media", None)
        return original(cls, media if isinstance(media, Image.Image) else obj)

    monkeypatch.setattr(MultiModalHasher, "serialize_item", classmethod(by_pixels))
    results = {r["name"]: r for r in vlm_fastpath.apply("vllm", [NAME])}
    assert results[NAME]["status"] == "stood-aside"
    assert "reads its pixels" in results[NAME]["reason"]


def test_revert_restores_the_original():
    from vllm.multimodal.hasher import MultiModalHasher

    patched = (getattr(home, patch_module.RESOLVE), MultiModalHasher.__dict__["serialize_item"])
    vlm_fastpath.revert("vllm", [NAME])
    restored = (getattr(home, patch_module.RESOLVE), MultiModalHasher.__dict__["serialize_item"])
    assert restored[0] is patched[0].__vlm_fastpath_original__
    assert restored[1].__func__ is patched[1].__func__.__vlm_fastpath_original__
    assert not hasattr(restored[0], "__vlm_fastpath_original__")


def test_media_with_bytes_fields_are_kept():
    """Every field of the release's wrapper but the image is recorded (io_config included)."""
    wrapper = load(FILES["png-rgba"])
    image = resolve(wrapper)[0]["image"]
    rebuilt = encoded_source.rewrap(image)
    assert type(rebuilt) is type(wrapper) and rebuilt.media is image
    for field in dataclasses.fields(wrapper):
        assert getattr(rebuilt, field.name) is getattr(wrapper, field.name)
