"""vLLM's ``ImageMediaIO.load_bytes``: every bad image is a ``ValueError`` (HTTP 400)."""

from __future__ import annotations

import pytest
from packaging.version import Version
from PIL import Image

import vlm_fastpath
from fixtures import bad_images

NAME = "vllm-image-loader-client-errors"
UPSTREAM = Version("0.34")  # load_bytes turns DecompressionBombError into ValueError itself
BAD = {
    "bomb": bad_images.bomb_png(),
    "truncated-jpeg": bad_images.truncated(bad_images.jpeg_bytes(256, 256)),
    "garbage": bad_images.garbage(),
}


def _io():
    from vllm.multimodal.media.image import ImageMediaIO

    return ImageMediaIO()


def _status() -> str:
    return next(r["status"] for r in vlm_fastpath.status("vllm") if r["name"] == NAME)


def test_status(vllm_version):
    assert _status() == ("upstream" if vllm_version >= UPSTREAM else "applied")


def test_bomb_escapes_as_a_non_value_error_without_the_patch(vllm_version):
    vlm_fastpath.revert("vllm")
    if vllm_version >= UPSTREAM:  # why the patch stands aside there: the release's own 400
        with pytest.raises(ValueError, match="Failed to load image") as info:
            _io().load_bytes(BAD["bomb"])
        assert isinstance(info.value.__cause__, Image.DecompressionBombError)
        return
    with pytest.raises(Image.DecompressionBombError):
        _io().load_bytes(BAD["bomb"])


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_bad_image_is_a_value_error(name):
    with pytest.raises(ValueError, match="Failed to load image") as info:
        _io().load_bytes(BAD[name])
    if name == "bomb":
        assert "decompression bomb" in str(info.value)
        assert isinstance(info.value.__cause__, Image.DecompressionBombError)


def test_good_image_is_the_releases():
    data = bad_images.png_bytes(40, 30)
    vlm_fastpath.revert("vllm")
    theirs = _io().load_bytes(data)
    vlm_fastpath.apply("vllm")
    ours = _io().load_bytes(data)
    assert ours.media.tobytes() == theirs.media.tobytes()
    assert ours.media.size == (40, 30)


def test_revert_restores_the_original(vllm_version):
    from vllm.multimodal.media.image import ImageMediaIO

    vlm_fastpath.revert("vllm")
    original = ImageMediaIO.__dict__["load_bytes"]
    vlm_fastpath.apply("vllm")
    replaced = ImageMediaIO.__dict__["load_bytes"] is not original
    assert replaced == (vllm_version < UPSTREAM)  # standing aside replaces nothing
    vlm_fastpath.revert("vllm")
    assert ImageMediaIO.__dict__["load_bytes"] is original
